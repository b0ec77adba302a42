"""Built-in Keras models and the hook for the user's own (`--model module:function`).

A model builder takes `(input_shape, num_classes)` and returns a Keras model whose output has
one score per class (logits or probabilities). A model that comes back uncompiled is compiled
with Adam and sparse categorical cross-entropy on logits, like the built-in ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import keras

from tpujob_trainer.config import ConfigError, split_module_function
from tpujob_trainer.data import SEQUENCE_BUCKETS, SEQUENCE_VOCAB_SIZE

# (the input shape of one example, None where any length goes; the number of classes) -> the model
ModelBuilder = Callable[[tuple[int | None, ...], int], keras.Model]


def digits_cnn(input_shape: tuple[int | None, ...], num_classes: int) -> keras.Model:
    """A small CNN for 8x8 (or MNIST-sized) digits."""
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(0.25)(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="digits_cnn")


def resnet_small(input_shape: tuple[int | None, ...], num_classes: int) -> keras.Model:
    """A ResNet with three stages of one basic block (about 0.2M parameters), for small images."""
    inputs = keras.Input(shape=input_shape)
    x = _conv_bn_relu(inputs, 32, strides=1)
    for filters, strides in ((32, 1), (64, 2), (128, 2)):
        x = _basic_block(x, filters, strides)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="resnet_small")


def _conv_bn_relu(x: keras.KerasTensor, filters: int, strides: int) -> keras.KerasTensor:
    x = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.layers.ReLU()(x)


def _basic_block(x: keras.KerasTensor, filters: int, strides: int) -> keras.KerasTensor:
    shortcut = x
    if strides != 1 or x.shape[-1] != filters:
        shortcut = keras.layers.Conv2D(filters, 1, strides=strides, use_bias=False)(x)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    y = _conv_bn_relu(x, filters, strides)
    y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    return keras.layers.ReLU()(keras.layers.Add()([shortcut, y]))


def sequence_cnn(input_shape: tuple[int | None, ...], num_classes: int) -> keras.Model:
    """Token sequences of any length (int32, 0 = padding) -> one score per class: embedding, a causal
    convolution and a mean over the real tokens. Padding changes nothing, so batches padded to a
    few bucket lengths (TPU) train the same model that serves every length."""
    if len(input_shape) != 1:
        raise ConfigError(f"--model sequence-cnn: takes token sequences, not examples of shape {input_shape}")
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(SEQUENCE_VOCAB_SIZE, 32)(tokens)
    # Causal: a position sees only itself and earlier tokens, never the padding after the sequence.
    x = keras.layers.Conv1D(64, 3, padding="causal", activation="relu")(x)
    x = MaskedMean()([x, tokens])
    x = keras.layers.Dense(64, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(tokens, outputs, name="sequence_cnn")


@keras.saving.register_keras_serializable(package="tpujob_trainer")
class MaskedMean(keras.layers.Layer):
    """[features [batch, length, d], tokens [batch, length]] -> the mean of the features over the
    positions whose token is not 0 (padding); 0 for an empty sequence."""

    def call(self, inputs: list[keras.KerasTensor]) -> keras.KerasTensor:
        features, tokens = inputs
        mask = keras.ops.expand_dims(keras.ops.cast(keras.ops.not_equal(tokens, 0), features.dtype), -1)
        total = keras.ops.sum(features * mask, axis=1)
        return total / keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)

    def compute_output_shape(self, input_shape: list[tuple[int | None, ...]]) -> tuple[int | None, ...]:
        features_shape = input_shape[0]
        return (features_shape[0], features_shape[2])


BUILT_IN_MODELS: dict[str, ModelBuilder] = {
    "digits-cnn": digits_cnn,
    "resnet-small": resnet_small,
    "sequence-cnn": sequence_cnn,
}
# The input shape each built-in model is sized for (used for synthetic data).
BUILT_IN_INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "digits-cnn": (8, 8, 1),
    "resnet-small": (32, 32, 3),
    "sequence-cnn": (SEQUENCE_BUCKETS[-1],),
}
# Built-in models that take int32 tokens (0 = padding) below this vocabulary size, not images.
TOKEN_MODELS: dict[str, int] = {"sequence-cnn": SEQUENCE_VOCAB_SIZE}
DEFAULT_INPUT_SHAPE = (32, 32, 3)


def built_in_name(name: str) -> str:
    """Built-in names take '-' or '_' (digits_cnn reads like the Python function it is)."""
    return name.replace("_", "-")


def resolve_builder(spec: str) -> ModelBuilder:
    target = split_module_function(spec, "model")
    if target is None:
        spec = built_in_name(spec)
        if spec not in BUILT_IN_MODELS:
            raise ConfigError(
                f"--model: {spec!r} is not a built-in model ({', '.join(BUILT_IN_MODELS)}); "
                "give your own as module:function"
            )
        return BUILT_IN_MODELS[spec]
    return load_function(*target, what="model")


def load_function(module_name: str, function_name: str, *, what: str) -> Callable[..., object]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(
            f"--{what}: cannot import {module_name!r} ({error}); is it on PYTHONPATH?"
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(f"--{what}: {module_name!r} has no function {function_name!r}")
    return function  # type: ignore[no-any-return]


def build_model(
    spec: str, input_shape: tuple[int | None, ...], num_classes: int, learning_rate: float
) -> keras.Model:
    """Build and compile; call inside `strategy.scope()` so variables are distributed."""
    model = resolve_builder(spec)(tuple(input_shape), num_classes)
    if not isinstance(model, keras.Model):
        raise ConfigError(f"--model {spec}: returned {type(model).__name__}, expected a keras.Model")
    if not model.compiled:
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    # Optimizer slots exist before a checkpoint is restored into them.
    model.optimizer.build(model.trainable_variables)
    return model
