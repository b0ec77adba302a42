"""The TensorFlow trainer run on every TPU host."""
