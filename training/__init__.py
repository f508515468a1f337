"""Training-side code: data generation, pair mining, fine-tuning, calibration and ONNX export.

The only package that needs torch; nothing on the runtime path imports it. Submodules are
imported explicitly (``from training.export import export_onnx``) so that importing the
package stays cheap.
"""

__all__: list[str] = []
