"""A user's own model and dataset, loaded by the trainer as --model/--data module:function."""

import keras
import numpy as np
import tensorflow as tf


def build(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    # Returned uncompiled: the trainer compiles it like its built-in models.
    return keras.Sequential(
        [keras.Input(input_shape), keras.layers.Flatten(), keras.layers.Dense(num_classes)]
    )


def dataset(split: str) -> tf.data.Dataset:
    """Two classes: bright images are 1, dark ones 0."""
    rng = np.random.default_rng(0 if split == "train" else 1)
    labels = rng.integers(0, 2, size=256 if split == "train" else 64).astype(np.int32)
    images = (rng.random((len(labels), 4, 4, 1)) * 0.5 + labels[:, None, None, None] * 0.5).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((images, labels))


dataset.num_classes = 2  # type: ignore[attr-defined]
