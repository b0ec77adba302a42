"""tpujob's TensorFlow trainer: `python -m tpujob_trainer` (see cli.py)."""
