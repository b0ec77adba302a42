"""The TFRecord format and the input pipelines, on real TensorFlow."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tpujob_trainer import data


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> data.DatasetInfo:
    """20 PNG images 4x4x3 whose every pixel equals its label, in 4 training shards."""
    labels = np.arange(20) % 10
    images = np.repeat(labels.astype(np.uint8), 4 * 4 * 3).reshape(20, 4, 4, 3)
    return data.write_dataset(
        str(tmp_path_factory.mktemp("small")),
        "small",
        {"train": (images, labels), "test": (images[:7], labels[:7])},
        encoding="png",
        num_classes=10,
        max_value=1.0,
        shards={"train": 4, "test": 1},
    )


def decoded(dataset: tf.data.Dataset) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(image.numpy(), label.numpy()) for image, label in dataset]


def test_written_dataset_loads_back_and_decodes(small_dataset: data.DatasetInfo) -> None:
    info = data.load_info(small_dataset.directory)
    assert info == small_dataset
    assert info.splits["train"].examples == 20 and len(info.files("train")) == 4
    examples = decoded(tf.data.TFRecordDataset(info.files("train")).map(data.decoder_for(info)))
    assert sorted(int(label) for _, label in examples) == sorted(np.arange(20) % 10)
    for image, label in examples:
        assert image.shape == (4, 4, 3) and image.dtype == np.uint8
        assert np.all(image == label)  # pixel value == label survives the PNG round trip


def test_batches_are_normalized_to_float(small_dataset: data.DatasetInfo) -> None:
    digits_like = data.DatasetInfo(
        "d", (4, 4, 3), "png", 10, 16.0, small_dataset.splits, small_dataset.directory
    )
    pipeline = data.training_pipeline(
        digits_like.files("train"),
        data.decoder_for(digits_like),
        batch_size=4,
        normalize=data.normalizer_for(digits_like),
    )
    images, labels = next(iter(pipeline))
    assert images.dtype == tf.float32
    assert np.allclose(images.numpy(), labels.numpy()[:, None, None, None] / 16.0)


def test_no_metadata_means_no_dataset(tmp_path: Path) -> None:
    assert data.load_info(str(tmp_path)) is None


def test_training_batches_have_a_fixed_shape_and_repeat(small_dataset: data.DatasetInfo) -> None:
    pipeline = data.training_pipeline(
        small_dataset.files("train"), data.decoder_for(small_dataset), batch_size=8, shuffle_buffer=20
    )
    batches = list(pipeline.take(10))  # 80 examples from 20: it repeats
    assert all(images.shape == (8, 4, 4, 3) and labels.shape == (8,) for images, labels in batches)
    assert pipeline.element_spec[0].shape == (8, 4, 4, 3)  # drop_remainder: static batch dimension


def test_each_worker_reads_its_own_files(small_dataset: data.DatasetInfo) -> None:
    def one_pass(pipeline_id: int) -> list[bytes]:
        files = tf.data.Dataset.from_tensor_slices(small_dataset.files("train"))
        shard = files.shard(2, pipeline_id)
        return [bytes(record.numpy()) for record in tf.data.TFRecordDataset(shard)]

    # What training_pipeline does for 2 workers, checked on the records themselves.
    first, second = one_pass(0), one_pass(1)
    assert len(first) == len(second) == 10
    assert not set(first) & set(second)

    per_worker = [
        data.training_pipeline(
            small_dataset.files("train"),
            data.decoder_for(small_dataset),
            batch_size=10,
            num_pipelines=2,
            pipeline_id=worker,
            shuffle_buffer=1,
        )
        for worker in (0, 1)
    ]
    labels = [sorted(next(iter(pipeline))[1].numpy().tolist()) for pipeline in per_worker]
    assert sorted(labels[0] + labels[1]) == sorted((np.arange(20) % 10).tolist())


def test_pipeline_options_autotune_and_leave_sharding_to_us() -> None:
    options = data.pipeline_options()
    assert options.autotune.enabled is True
    assert options.experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF


def test_evaluation_pads_to_equal_steps_and_counts_every_example_once(
    small_dataset: data.DatasetInfo,
) -> None:
    test_examples = tf.data.TFRecordDataset(small_dataset.files("test")).map(data.decoder_for(small_dataset))
    steps = data.evaluation_steps(7, global_batch_size=4, num_pipelines=2)
    assert steps == 2  # 4 examples per worker, 2 per worker per step
    per_worker = [
        list(
            data.evaluation_pipeline(
                test_examples, batch_size=2, batches=steps, num_pipelines=2, pipeline_id=w
            )
        )
        for w in (0, 1)
    ]
    assert [len(batches) for batches in per_worker] == [2, 2]
    weights = [float(tf.reduce_sum(batch[2])) for batches in per_worker for batch in batches]
    assert sum(weights) == 7.0


@pytest.mark.parametrize(
    ("mode", "decoded_bytes", "available", "cache"),
    [
        ("auto", 100, 1000, True),
        ("auto", 300, 1000, False),  # over a quarter of the available memory
        ("auto", 1, 0, False),  # unknown memory
        ("memory", 10**12, 1000, True),
        ("off", 1, 10**12, False),
    ],
)
def test_should_cache(mode: str, decoded_bytes: int, available: int, cache: bool) -> None:
    assert data.should_cache(mode, decoded_bytes, available) is cache


def test_digits_come_from_scikit_learn_without_a_download(digits_dir: Path) -> None:
    info = data.load_info(str(digits_dir))
    assert info is not None
    assert (info.image_shape, info.num_classes) == ((8, 8, 1), 10)
    assert info.splits["train"].examples + info.splits["test"].examples == 1797
    assert info.splits["test"].examples == 360


def test_synthetic_batches() -> None:
    images, labels = next(iter(data.synthetic_pipeline((8, 8, 1), 10, batch_size=4)))
    assert images.shape == (4, 8, 8, 1) and labels.shape == (4,)
    assert int(tf.reduce_min(labels)) >= 0 and int(tf.reduce_max(labels)) < 10


def test_sequences_train_in_static_bucket_shapes_and_evaluate_at_one_length() -> None:
    examples = data.sequence_examples("train", examples=512)
    lengths = [int(tf.shape(tokens)[0]) for tokens, _ in examples]
    assert min(lengths) >= data.SEQUENCE_MIN_LENGTH and max(lengths) <= data.SEQUENCE_BUCKETS[-1]
    batches = data.bucketed_for_training(examples, batch_size=8, buckets=data.SEQUENCE_BUCKETS).take(30)
    shapes = {tuple(tokens.shape) for tokens, labels in batches}
    assert {length for _, length in shapes} <= set(data.SEQUENCE_BUCKETS)  # a few static lengths
    assert {size for size, _ in shapes} == {8}  # drop_remainder: a static batch dimension
    tokens, label = next(iter(data.sequence_examples("test").map(data.padded_to(64))))
    assert tokens.shape == (64,) and label.dtype == tf.int32
