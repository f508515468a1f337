"""The released model folders (installed as the ``toolrank_models`` package): see models/*/MODEL_CARD.md."""
