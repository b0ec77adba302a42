"""Where training examples come from: built-in TFRecords, synthetic batches, or the user's function.

Every source gives the same thing to the trainer: per-worker input pipelines for
`strategy.distribute_datasets_from_function`, and (when it has one) the test split.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from tpujob_trainer import data
from tpujob_trainer.config import ConfigError, TrainerConfig, split_module_function
from tpujob_trainer.models import (
    BUILT_IN_INPUT_SHAPES,
    DEFAULT_INPUT_SHAPE,
    TOKEN_MODELS,
    built_in_name,
    load_function,
)

log = logging.getLogger(__name__)

# (input_context, per-replica batch size) -> that worker's batched dataset
TrainInput = Callable[[tf.distribute.InputContext, int], tf.data.Dataset]


@dataclass(frozen=True)
class DataSource:
    description: str
    input_shape: tuple[int | None, ...]  # of one example; None: any length (sequences)
    num_classes: int
    train: TrainInput
    train_examples: int | None = None  # None: unknown or infinite; --epochs is then not possible
    # Decoded, unbatched (image, label) examples of the test split, or None without one.
    test: Callable[[], tf.data.Dataset] | None = None
    test_examples: int | None = None
    # Applied to whole batches of both splits (uint8 -> float32), or None when examples are ready.
    normalize: data.ExampleMap | None = None
    # What serving takes: the examples as decoded, before `normalize` (the export includes it).
    example_dtype: str = "float32"
    input_name: str = "images"
    # Sequences: training batches are padded to these lengths (the TPU serving path does the same).
    bucket_lengths: tuple[int, ...] = ()

    @property
    def model_input_dtype(self) -> str:
        return "float32" if self.normalize is not None else self.example_dtype


def default_data_dir(name: str) -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tpujob", "data", name)


def open_source(config: TrainerConfig) -> DataSource:
    user_function = split_module_function(config.data, "data")
    if user_function is not None:
        return _user_source(config, load_function(*user_function, what="data"))
    if config.data == "synthetic":
        return _synthetic_source(config)
    if config.data == "sequences":
        return _sequence_source(config)
    if config.data == "digits":
        info = data.ensure_dataset("digits", config.data_dir or default_data_dir("digits"))
        return _records_source(config, info)
    if config.data == "records":
        if not config.data_dir:
            raise ConfigError(
                "--data records: give --data-dir (TPUJOB_DATA_DIR), a directory with dataset.json"
            )
        found = data.load_info(config.data_dir)
        if found is None:
            raise ConfigError(f"--data-dir: no {data.METADATA_FILE} in {config.data_dir!r}")
        return _records_source(config, found)
    raise ConfigError(
        f"--data: {config.data!r} is not a built-in dataset (digits, records, sequences, synthetic); "
        "give your own as module:function"
    )


def _records_source(config: TrainerConfig, info: data.DatasetInfo) -> DataSource:
    if "train" not in info.splits:
        raise ConfigError(f"--data-dir {info.directory}: {data.METADATA_FILE} has no 'train' split")
    decode = data.decoder_for(info)
    normalize = data.normalizer_for(info)
    cache = data.should_cache(config.cache, info.decoded_bytes("train"), data.available_memory_bytes())
    log.info(
        "data: %s from %s, %d training examples, cache in memory: %s",
        info.name,
        info.directory,
        info.splits["train"].examples,
        cache,
    )
    train_files = info.files("train")

    def train(context: tf.distribute.InputContext, batch_size: int) -> tf.data.Dataset:
        return data.training_pipeline(
            train_files,
            decode,
            batch_size=batch_size,
            num_pipelines=context.num_input_pipelines,
            pipeline_id=context.input_pipeline_id,
            cache=cache,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
            normalize=normalize,
        )

    test = None
    if "test" in info.splits:
        test_files = info.files("test")

        def test() -> tf.data.Dataset:
            return tf.data.TFRecordDataset(test_files).map(decode, num_parallel_calls=tf.data.AUTOTUNE)

    return DataSource(
        description=f"{info.name} TFRecords in {info.directory}",
        input_shape=info.image_shape,
        num_classes=info.num_classes,
        train=train,
        train_examples=info.splits["train"].examples,
        test=test,
        test_examples=info.splits["test"].examples if "test" in info.splits else None,
        normalize=normalize,
        example_dtype="uint8",
    )


def _synthetic_source(config: TrainerConfig) -> DataSource:
    model = built_in_name(config.model)
    shape = BUILT_IN_INPUT_SHAPES.get(model, DEFAULT_INPUT_SHAPE)
    vocab_size = TOKEN_MODELS.get(model)
    num_classes = 10

    def train(context: tf.distribute.InputContext, batch_size: int) -> tf.data.Dataset:
        seed = config.seed + context.input_pipeline_id
        return data.synthetic_pipeline(
            shape, num_classes, batch_size=batch_size, seed=seed, vocab_size=vocab_size
        )

    if vocab_size is not None:
        return DataSource(
            f"synthetic {shape} token sequences",
            (None,),
            num_classes,
            train,
            example_dtype="int32",
            input_name="tokens",
        )
    return DataSource(f"synthetic {shape} images", shape, num_classes, train)


def _sequence_source(config: TrainerConfig) -> DataSource:
    """Token sequences of 8-64 tokens (generated, no download), batched in length buckets."""
    cache = config.cache != "off"  # a few MB
    buckets = data.SEQUENCE_BUCKETS

    def train(context: tf.distribute.InputContext, batch_size: int) -> tf.data.Dataset:
        examples = data.sequence_examples("train")
        if context.num_input_pipelines > 1:
            examples = examples.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data.bucketed_for_training(
            examples,
            batch_size=batch_size,
            buckets=buckets,
            cache=cache,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
        )

    def test() -> tf.data.Dataset:
        # Evaluation batches need one static shape: every sequence padded to the longest bucket.
        return data.sequence_examples("test").map(data.padded_to(buckets[-1]))

    return DataSource(
        description=f"token sequences of {data.SEQUENCE_MIN_LENGTH}-{buckets[-1]} tokens, buckets {buckets}",
        input_shape=(None,),
        num_classes=data.SEQUENCE_CLASSES,
        train=train,
        train_examples=data.SEQUENCE_SPLITS["train"][0],
        test=test,
        test_examples=data.SEQUENCE_SPLITS["test"][0],
        example_dtype="int32",
        input_name="tokens",
        bucket_lengths=buckets,
    )


def _user_source(config: TrainerConfig, function: Callable[..., object]) -> DataSource:
    """`function(split)` returns unbatched (image, label) examples, or None for a missing split."""
    train_examples = _call_user_data(config, function, "train")
    if train_examples is None:
        raise ConfigError(f"--data {config.data}: returned None for the 'train' split")
    image_spec = train_examples.element_spec[0]
    num_classes = int(getattr(function, "num_classes", 10))
    cardinality = int(train_examples.cardinality())

    def train(context: tf.distribute.InputContext, batch_size: int) -> tf.data.Dataset:
        examples = _call_user_data(config, function, "train")
        assert examples is not None
        if context.num_input_pipelines > 1:
            examples = examples.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data.batched_for_training(
            examples,
            batch_size=batch_size,
            cache=config.cache == "memory",  # size unknown: cache only when asked
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
        )

    test_examples = _call_user_data(config, function, "test")
    test_cardinality = int(test_examples.cardinality()) if test_examples is not None else -1
    return DataSource(
        description=f"{config.data} (user function)",
        input_shape=tuple(image_spec.shape),
        example_dtype=image_spec.dtype.name,
        input_name="inputs",
        num_classes=num_classes,
        train=train,
        train_examples=cardinality if cardinality > 0 else None,
        test=(lambda: _call_user_data(config, function, "test")) if test_cardinality > 0 else None,
        test_examples=test_cardinality if test_cardinality > 0 else None,
    )


def _call_user_data(
    config: TrainerConfig, function: Callable[..., object], split: str
) -> tf.data.Dataset | None:
    result = function(split)
    if result is not None and not isinstance(result, tf.data.Dataset):
        raise ConfigError(
            f"--data {config.data}: returned {type(result).__name__} for {split!r}, expected tf.data"
        )
    return result
