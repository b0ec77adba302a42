"""Datasets as TFRecords and the tf.data input pipeline that feeds the accelerators.

On-disk format: `dataset.json` (shape, encoding, classes, splits) next to TFRecord shards of
`tf.train.Example`s with an encoded `image` and an int64 `label`. `dataset.json` is written
last, so its presence means the dataset is complete; shards are renamed into place, so
workers that prepare the same dataset at the same time cannot see half-written files.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)

METADATA_FILE = "dataset.json"
ENCODINGS = ("raw", "png", "jpeg")
Decoder = Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
ExampleMap = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


@dataclass(frozen=True)
class Split:
    files: tuple[str, ...]  # relative to the dataset directory
    examples: int


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    image_shape: tuple[int, int, int]
    encoding: str
    num_classes: int
    # Pixel values are divided by this after decoding (digits: 16, 8-bit images: 255).
    max_value: float
    splits: Mapping[str, Split]
    directory: str = ""

    def files(self, split: str) -> list[str]:
        return [os.path.join(self.directory, name) for name in self.splits[split].files]

    def decoded_bytes(self, split: str) -> int:
        return self.splits[split].examples * math.prod(self.image_shape)  # uint8 pixels


# --- writing ---


def write_dataset(
    directory: str,
    name: str,
    splits: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    encoding: str,
    num_classes: int,
    max_value: float,
    shards: Mapping[str, int],
) -> DatasetInfo:
    """Write uint8 images [N, H, W, C] and integer labels as sharded TFRecords plus dataset.json."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding {encoding!r} is not one of {ENCODINGS}")
    tf.io.gfile.makedirs(directory)
    written: dict[str, Split] = {}
    shape: tuple[int, int, int] | None = None
    for split, (images, labels) in splits.items():
        shape = tuple(images.shape[1:])
        count = shards[split]
        names = tuple(f"{split}-{index:05d}-of-{count:05d}.tfrecord" for index in range(count))
        for index, file_name in enumerate(names):
            _write_shard(
                os.path.join(directory, file_name), images[index::count], labels[index::count], encoding
            )
        written[split] = Split(files=names, examples=len(labels))
    assert shape is not None, "at least one split"
    info = DatasetInfo(name, shape, encoding, num_classes, max_value, written, directory)
    _write_atomically(os.path.join(directory, METADATA_FILE), json.dumps(_info_json(info), indent=2).encode())
    return info


def _write_shard(path: str, images: np.ndarray, labels: np.ndarray, encoding: str) -> None:
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with tf.io.TFRecordWriter(temporary) as writer:
        for image, label in zip(images, labels, strict=True):
            features = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[_encode(image, encoding)])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _encode(image: np.ndarray, encoding: str) -> bytes:
    if encoding == "raw":
        return image.astype(np.uint8).tobytes()
    encode = tf.io.encode_png if encoding == "png" else tf.io.encode_jpeg
    return bytes(encode(tf.constant(image, dtype=tf.uint8)).numpy())


def _write_atomically(path: str, content: bytes) -> None:
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with tf.io.gfile.GFile(temporary, "wb") as handle:
        handle.write(content)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _info_json(info: DatasetInfo) -> dict[str, Any]:
    data = dataclasses.asdict(info)
    data.pop("directory")
    return data


def load_info(directory: str) -> DatasetInfo | None:
    path = os.path.join(directory, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as handle:
        data = json.load(io.BytesIO(handle.read()))
    splits = {
        name: Split(tuple(split["files"]), int(split["examples"])) for name, split in data["splits"].items()
    }
    return DatasetInfo(
        name=data["name"],
        image_shape=tuple(data["image_shape"]),
        encoding=data["encoding"],
        num_classes=int(data["num_classes"]),
        max_value=float(data["max_value"]),
        splits=splits,
        directory=directory,
    )


def prepare_digits(directory: str) -> DatasetInfo:
    """scikit-learn's bundled 8x8 digits (no download) as train/test TFRecords, split 80/20."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.uint8)[..., np.newaxis]  # values 0..16
    train_x, test_x, train_y, test_y = train_test_split(
        images, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    return write_dataset(
        directory,
        "digits",
        {"train": (train_x, train_y), "test": (test_x, test_y)},
        encoding="raw",
        num_classes=10,
        max_value=16.0,
        shards={"train": 4, "test": 2},  # several shards so each worker reads its own files
    )


BUILT_IN_PREPARERS: dict[str, Callable[[str], DatasetInfo]] = {"digits": prepare_digits}


def ensure_dataset(name: str, directory: str) -> DatasetInfo:
    """The dataset at `directory`, written first from what a package ships if it is not there."""
    info = load_info(directory)
    if info is not None:
        return info
    log.info("no %s in %s: writing the TFRecords from the bundled copy", METADATA_FILE, directory)
    return BUILT_IN_PREPARERS[name](directory)


# --- reading ---


def decoder_for(info: DatasetInfo) -> Decoder:
    """Serialized example -> (uint8 image, int32 label). Pixels stay uint8 until after batching:
    a quarter of the memory in the cache, and cheaper crops and flips."""
    height, width, channels = info.image_shape
    features = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(serialized, features)
        if info.encoding == "raw":
            image = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), info.image_shape)
        else:
            image = tf.io.decode_image(example["image"], channels=channels, expand_animations=False)
            image = tf.ensure_shape(image, [height, width, channels])
        return image, tf.cast(example["label"], tf.int32)

    return decode


def normalizer_for(info: DatasetInfo) -> ExampleMap:
    """uint8 images -> float32 in [0, 1]; applied to whole batches (one vectorized op per batch)."""

    def normalize(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.cast(images, tf.float32) / info.max_value, labels

    return normalize


def should_cache(mode: str, decoded_bytes: int, available_bytes: int) -> bool:
    """Cache decoded examples in memory when asked to, or (auto) when they use under a quarter of it."""
    if mode == "memory":
        return True
    if mode == "off":
        return False
    return decoded_bytes < available_bytes // 4


def available_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # unknown: auto never caches


def training_pipeline(
    files: list[str],
    decode: Decoder,
    *,
    batch_size: int,
    num_pipelines: int = 1,
    pipeline_id: int = 0,
    cache: bool = False,
    shuffle_buffer: int = 10_000,
    seed: int = 0,
    augment: ExampleMap | None = None,
    normalize: ExampleMap | None = None,
) -> tf.data.Dataset:
    """Cloud TPU guidance, in order: files sharded per worker, parallel interleave, parallel
    decode, cache, shuffle, repeat, (augment), fixed-shape batches, (normalize), prefetch last."""
    file_names = tf.data.Dataset.from_tensor_slices(files)
    shard_files = num_pipelines > 1 and len(files) >= num_pipelines
    if shard_files:
        file_names = file_names.shard(num_pipelines, pipeline_id)
    file_names = file_names.shuffle(len(files), seed=seed)
    dataset = file_names.interleave(
        tf.data.TFRecordDataset,
        cycle_length=max(1, min(len(files), 8)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    if num_pipelines > 1 and not shard_files:
        # Fewer files than workers: every worker reads everything and keeps its share.
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return batched_for_training(
        dataset,
        batch_size=batch_size,
        cache=cache,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        augment=augment,
        normalize=normalize,
    )


def batched_for_training(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    cache: bool = False,
    shuffle_buffer: int = 10_000,
    seed: int = 0,
    augment: ExampleMap | None = None,
    normalize: ExampleMap | None = None,
) -> tf.data.Dataset:
    """Decoded examples -> cache, shuffle, repeat, (augment), fixed-shape batches, (normalize),
    prefetch last."""
    if cache:
        examples = examples.cache()
    dataset = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    if augment is not None:
        dataset = dataset.map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    # Fixed batch shapes: TPUs compile one program per shape.
    dataset = dataset.batch(batch_size, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE)
    if normalize is not None:
        dataset = dataset.map(normalize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(pipeline_options())


def pipeline_options() -> tf.data.Options:
    options = tf.data.Options()
    options.autotune.enabled = True
    options.deterministic = False
    # Each worker already reads its own shard: tf.distribute must not shard again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def evaluation_pipeline(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    batches: int,
    num_pipelines: int = 1,
    pipeline_id: int = 0,
    normalize: ExampleMap | None = None,
) -> tf.data.Dataset:
    """Decoded (image, label) -> (image, label, weight) batches, padded with weight-0 examples.

    Every replica then runs the same number of fixed-shape steps (collectives and TPUs need
    that) and the weights count every test example exactly once.
    """
    if num_pipelines > 1:
        examples = examples.shard(num_pipelines, pipeline_id)
    weighted = examples.map(lambda image, label: (image, label, tf.constant(1.0)))
    image_spec, label_spec = examples.element_spec
    padding = tf.data.Dataset.from_tensors(
        (tf.zeros(image_spec.shape, image_spec.dtype), tf.zeros([], label_spec.dtype), tf.constant(0.0))
    ).repeat()
    batched = weighted.concatenate(padding).take(batches * batch_size).batch(batch_size, drop_remainder=True)
    if normalize is not None:
        batched = batched.map(lambda images, labels, weights: (*normalize(images, labels), weights))
    options = pipeline_options()
    # Workers keep every n-th example of the same order: in an order that varies (a parallel decode
    # that need not keep it), some examples would be counted twice and others never.
    options.deterministic = True
    return batched.prefetch(tf.data.AUTOTUNE).with_options(options)


def evaluation_steps(examples: int, global_batch_size: int, num_pipelines: int) -> int:
    """Steps that cover every example when each of `num_pipelines` feeds an equal share of a step."""
    per_pipeline_examples = math.ceil(examples / num_pipelines)
    per_pipeline_batch = global_batch_size // num_pipelines
    return max(1, math.ceil(per_pipeline_examples / per_pipeline_batch))


# --- token sequences of varying length (a built-in task, generated: no download) ---

SEQUENCE_VOCAB_SIZE = 64  # token 0 is padding
SEQUENCE_CLASSES = 4
SEQUENCE_MIN_LENGTH = 8
# Training batches are padded to the smallest of these that fits (TPUs compile one program per
# shape: a few static lengths, not one per batch); no sequence is longer than the last.
SEQUENCE_BUCKETS = (16, 32, 64)
SEQUENCE_SPLITS = {"train": (8192, 0), "test": (1024, 1)}  # examples, seed


def sequence_examples(split: str, examples: int | None = None, seed: int | None = None) -> tf.data.Dataset:
    """Unbatched (tokens, label): int32 sequences of 8-64 tokens in 1..63 and a class 0..3.

    About a third of a sequence's tokens come from its class's group (tokens t with t % 4 == class),
    the rest are uniform: the class is the group that occurs most often.
    """
    default_examples, default_seed = SEQUENCE_SPLITS[split]
    count = default_examples if examples is None else examples
    rng = np.random.default_rng(default_seed if seed is None else seed)
    longest = SEQUENCE_BUCKETS[-1]
    labels = rng.integers(0, SEQUENCE_CLASSES, size=count).astype(np.int32)
    lengths = rng.integers(SEQUENCE_MIN_LENGTH, longest + 1, size=count).astype(np.int32)
    uniform = rng.integers(1, SEQUENCE_VOCAB_SIZE, size=(count, longest))
    # The class's group, 4 + class .. 60 + class: 15 tokens each.
    multiples = rng.integers(1, SEQUENCE_VOCAB_SIZE // SEQUENCE_CLASSES, size=(count, longest))
    in_group = multiples * SEQUENCE_CLASSES + labels[:, None]
    tokens = np.where(rng.random((count, longest)) < 1 / 3, in_group, uniform).astype(np.int32)
    tokens[np.arange(longest)[None, :] >= lengths[:, None]] = 0
    return tf.data.Dataset.from_tensor_slices((tokens, lengths, labels)).map(
        lambda padded, length, label: (padded[:length], label)
    )


def padded_to(length: int) -> ExampleMap:
    """(tokens, label) -> (tokens zero-padded or cut to `length`, label): a static shape."""

    def pad(tokens: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        tokens = tokens[:length]
        tokens = tf.pad(tokens, [[0, length - tf.shape(tokens)[0]]])
        return tf.ensure_shape(tokens, [length]), label

    return pad


def bucketed_for_training(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    buckets: tuple[int, ...],
    cache: bool = False,
    shuffle_buffer: int = 10_000,
    seed: int = 0,
) -> tf.data.Dataset:
    """(tokens, label) of varying length -> cache, shuffle, repeat, batches of `batch_size` padded to
    the smallest bucket length that fits (drop_remainder: a static batch dimension), prefetch."""
    if cache:
        examples = examples.cache()
    dataset = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    longest = buckets[-1]
    dataset = dataset.map(lambda tokens, label: (tokens[:longest], label))
    dataset = dataset.bucket_by_sequence_length(
        lambda tokens, _label: tf.shape(tokens)[0],
        bucket_boundaries=[length + 1 for length in buckets],
        bucket_batch_sizes=[batch_size] * (len(buckets) + 1),
        pad_to_bucket_boundary=True,  # pads to boundary - 1: exactly the bucket lengths
        drop_remainder=True,
    )
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(pipeline_options())


def synthetic_pipeline(
    image_shape: tuple[int, ...],
    num_classes: int,
    *,
    batch_size: int,
    seed: int = 0,
    vocab_size: int | None = None,
) -> tf.data.Dataset:
    """One random batch, repeated: measures the model and the step, with no input cost.
    With `vocab_size`: int32 tokens 1..vocab_size-1 instead of float images."""
    generator = np.random.default_rng(seed)
    images: np.ndarray[Any, Any]
    if vocab_size is None:
        images = generator.random((batch_size, *image_shape), dtype=np.float32)
    else:
        images = generator.integers(1, vocab_size, size=(batch_size, *image_shape), dtype=np.int32)
    labels = generator.integers(0, num_classes, size=(batch_size,), dtype=np.int32)
    return tf.data.Dataset.from_tensors((images, labels)).cache().repeat().with_options(pipeline_options())
