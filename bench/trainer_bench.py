"""Benchmarks of the trainer (figures, not pass/fail tests): `.venv/bin/python bench/trainer_bench.py`.

1. Input pipeline: the trainer's tf.data pipeline against a naive one (sequential reads, map
   without parallelism, no cache, no prefetch) on the same JPEG TFRecords, with a realistic
   decode (JPEG decode, random crop and flip, normalization). Examples per second, measured
   for the first pass over the data (nothing cached yet) and for the passes after it.
2. Trainer overhead: the trainer's step loop (metrics, stop vote, input-wait timing, progress)
   against a bare `model.fit` on the same model, data and number of steps, both warmed up; with it,
   the cost of a checkpoint and of the export for serving (time and size) of each bundled model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from tpujob_trainer import data, export
from tpujob_trainer.config import TrainerConfig, WorkerEnv
from tpujob_trainer.metrics import TrainerMetrics
from tpujob_trainer.models import BUILT_IN_INPUT_SHAPES, TOKEN_MODELS, build_model, resolve_builder
from tpujob_trainer.progress import Progress
from tpujob_trainer.train import Checkpoints, StepLoop, StopSignal

# Stored JPEGs are decoded and resized once (cacheable, as in downsampled-ImageNet pipelines);
# each epoch then takes a random 56x56 crop of the 64x64 image and flips it.
IMAGE_SIZE = 128
RESIZED = 64
CROP = 56


def write_jpeg_dataset(directory: str, examples: int, shards: int) -> data.DatasetInfo:
    """Smooth random images (JPEG compresses them like photos, not like noise)."""
    rng = np.random.default_rng(0)
    low = rng.integers(0, 256, size=(examples, 8, 8, 3)).astype(np.float32)
    images = (
        tf.image.resize(low, (IMAGE_SIZE, IMAGE_SIZE), method="bicubic").numpy().clip(0, 255).astype(np.uint8)
    )
    labels = rng.integers(0, 10, size=examples)
    return data.write_dataset(
        directory,
        "jpeg-bench",
        {"train": (images, labels)},
        encoding="jpeg",
        num_classes=10,
        max_value=255.0,
        shards={"train": shards},
    )


def decode_and_resize(info: data.DatasetInfo) -> data.Decoder:
    decode = data.decoder_for(info)

    def decode_resized(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image, label = decode(serialized)
        image = tf.image.resize(image, (RESIZED, RESIZED), antialias=True)
        return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), label

    return decode_resized


def augment(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    image = tf.image.random_crop(image, (CROP, CROP, 3))
    return tf.image.random_flip_left_right(image), label


def normalize(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """To float, centred and scaled: works on one image or a whole batch."""
    return (tf.cast(images, tf.float32) / 255.0 - 0.5) / 0.25, labels


def trainer_pipeline(info: data.DatasetInfo, batch_size: int) -> tf.data.Dataset:
    cache = data.should_cache("auto", info.decoded_bytes("train"), data.available_memory_bytes())
    return data.training_pipeline(
        info.files("train"),
        decode_and_resize(info),
        batch_size=batch_size,
        cache=cache,
        augment=augment,
        normalize=normalize,
    )


def naive_pipeline(info: data.DatasetInfo, batch_size: int) -> tf.data.Dataset:
    """What a first version looks like: every step in sequence, one example at a time."""
    dataset = tf.data.TFRecordDataset(info.files("train")).map(decode_and_resize(info))
    dataset = dataset.shuffle(10_000, seed=0).repeat().map(augment).map(normalize)
    return dataset.batch(batch_size, drop_remainder=True)


def bench_pipeline(examples: int, batch_size: int, epochs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        info = write_jpeg_dataset(directory, examples, shards=8)
        per_epoch = examples // batch_size
        results: dict[str, float] = {}
        for name, build in (("trainer", trainer_pipeline), ("naive", naive_pipeline)):
            dataset = build(info, batch_size)
            iterator = iter(dataset)
            started = time.perf_counter()
            for _ in range(per_epoch):
                next(iterator)
            first = time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(per_epoch * (epochs - 1)):
                next(iterator)
            later = time.perf_counter() - started
            results[f"{name}_first_epoch"] = per_epoch * batch_size / first
            results[f"{name}_later_epochs"] = per_epoch * (epochs - 1) * batch_size / later
            results[f"{name}_overall"] = per_epoch * epochs * batch_size / (first + later)
        return results


class ChunkTimer(keras.callbacks.Callback):
    """Times every `chunk_steps` batches inside one fit() call (reads no logs: adds no sync)."""

    def __init__(self, chunk_steps: int) -> None:
        super().__init__()
        self.chunk_steps = chunk_steps
        self.times: list[float] = []
        self._last = 0.0

    def on_train_begin(self, logs: object = None) -> None:
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if (batch + 1) % self.chunk_steps == 0:
            now = time.perf_counter()
            self.times.append(now - self._last)
            self._last = now


def bench_overhead(chunk_steps: int, chunks: int, rounds: int, batch_size: int) -> dict[str, Any]:
    """Both sides warmed up, then `rounds` long runs each, alternating, timed in chunks of
    `chunk_steps` steps: on a shared machine the fastest chunks show the cost without the noise."""
    with tempfile.TemporaryDirectory() as directory:
        info = data.prepare_digits(directory)
        strategy = tf.distribute.get_strategy()

        def dataset() -> tf.data.Dataset:
            return data.training_pipeline(
                info.files("train"), data.decoder_for(info), batch_size=batch_size, cache=True
            )

        def model() -> Any:
            return build_model("digits-cnn", info.image_shape, info.num_classes, learning_rate=1e-3)

        # Bare Keras, as a notebook would do it: one fit() call per round.
        bare, bare_data = model(), dataset()
        bare.fit(bare_data, epochs=1, steps_per_epoch=100, verbose=0)

        def time_fit() -> list[float]:
            timer = ChunkTimer(chunk_steps)
            bare.fit(bare_data, epochs=1, steps_per_epoch=chunk_steps * chunks, verbose=0, callbacks=[timer])
            return timer.times

        # The trainer's loop as train.run drives it (checkpoints are measured apart).
        ours = model()
        ours._symbolic_build(  # as train.run does: state exists before the distributed step
            data_batch=(
                np.zeros((batch_size, *info.image_shape), np.float32),
                np.zeros((batch_size,), np.int32),
            )
        )
        loop = StepLoop(ours, strategy, TrainerMetrics(), batch_size)
        iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset()))
        checkpoints = Checkpoints(None, tf.train.Checkpoint(model=ours), WorkerEnv())
        config = TrainerConfig(metrics_port=0, log_every_steps=100)
        progress = Progress("log", is_chief=True)
        step = loop.run(iterator, 0, 100, StopSignal(), checkpoints, config, progress)

        def time_loop() -> list[float]:
            nonlocal step
            times = []
            for _ in range(chunks):
                started = time.perf_counter()
                step = loop.run(
                    iterator, step, step + chunk_steps, StopSignal(), checkpoints, config, progress
                )
                times.append(time.perf_counter() - started)
            return times

        fit_times: list[float] = []
        loop_times: list[float] = []
        for round_index in range(rounds):
            if round_index % 2 == 0:
                fit_times += time_fit()
                loop_times += time_loop()
            else:
                loop_times += time_loop()
                fit_times += time_fit()
        examples = chunk_steps * batch_size
        return {
            "steps": chunk_steps * chunks * rounds,
            "bare_fit_examples_per_second": examples / min(fit_times),
            "trainer_examples_per_second": examples / min(loop_times),
            "overhead_percent": (min(loop_times) / min(fit_times) - 1) * 100,
            "median_overhead_percent": (statistics.median(loop_times) / statistics.median(fit_times) - 1)
            * 100,
            "checkpoint_seconds": checkpoint_cost(model, directory),
            "export": export_cost(directory),
            "sigterm_checkpoint": sigterm_checkpoint_cost(directory),
        }


def checkpoint_cost(model_factory: object, directory: str) -> float:
    """One digits-cnn checkpoint save to local disk (the trainer saves one every 200 steps)."""
    model = model_factory()  # type: ignore[operator]
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer),
        str(Path(directory) / "ckpt"),
        max_to_keep=1,
    )
    manager.save(checkpoint_number=0)
    started = time.perf_counter()
    for number in range(1, 6):
        manager.save(checkpoint_number=number)
    return (time.perf_counter() - started) / 5


# What a spot reclaim leaves the workers between SIGTERM and SIGKILL (GKE's node shutdown grace for spot VMs).
SPOT_BUDGET_SECONDS = 15.0


def sigterm_checkpoint_cost(directory: str) -> dict[str, float]:
    """The checkpoint a worker saves on SIGTERM, for each bundled model with its optimizer state: the first
    save to a fresh directory (what a preempted attempt pays; the slowest of the run's saves), in seconds,
    to set against the 15 s spot budget."""
    costs = {}
    for name, shape in BUILT_IN_INPUT_SHAPES.items():
        model_shape: tuple[int | None, ...] = (None,) if name in TOKEN_MODELS else shape
        model = build_model(name, model_shape, 10, learning_rate=1e-3)
        model.optimizer.build(model.trainable_variables)  # the slots a trained model's checkpoint holds
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, optimizer=model.optimizer),
            str(Path(directory) / f"sigterm-{name}"),
            max_to_keep=1,
        )
        started = time.perf_counter()
        manager.save(checkpoint_number=1)
        costs[name] = time.perf_counter() - started
    return costs


def export_cost(directory: str) -> dict[str, dict[str, float]]:
    """Each bundled model's export for serving (SavedModel + model.json) to local disk: the fastest of
    three (the trainer exports once, at the end), and its size."""
    costs = {}
    for name, shape in BUILT_IN_INPUT_SHAPES.items():
        if name in TOKEN_MODELS:
            model_shape: tuple[int | None, ...] = (None,)
            serving = export.ServingInput(
                "tokens", model_shape, "int32", bucket_lengths=data.SEQUENCE_BUCKETS
            )
        else:
            model_shape = shape
            serving = export.ServingInput(
                "images", shape, "uint8", preprocess=lambda images: tf.cast(images, tf.float32) / 255.0
            )
        model = build_model(name, model_shape, 10, learning_rate=1e-3)

        def rebuild(name: str = name, model_shape: tuple[int | None, ...] = model_shape) -> Any:
            return resolve_builder(name)(model_shape, 10)

        runs = [
            export.export_model(model, str(Path(directory) / f"export-{name}"), serving, rebuild=rebuild)
            for _ in range(3)
        ]
        costs[name] = {
            "seconds": min(run.seconds for run in runs),
            "megabytes": runs[-1].size_bytes / 1e6,
            "parameters": float(model.count_params()),
        }
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=4096, help="JPEG images in the pipeline benchmark")
    parser.add_argument("--epochs", type=int, default=4, help="passes over them")
    parser.add_argument("--chunk-steps", type=int, default=150, help="training steps per timed chunk")
    parser.add_argument("--chunks", type=int, default=8, help="timed chunks per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--only", choices=("pipeline", "overhead"), help="run one of the two benchmarks")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()

    results: dict[str, dict[str, Any]] = {}
    if args.only != "overhead":
        results["pipeline"] = bench_pipeline(args.examples, batch_size=128, epochs=args.epochs)
    if args.only != "pipeline":
        results["overhead"] = bench_overhead(args.chunk_steps, args.chunks, args.rounds, batch_size=64)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPU cores, load average {load:.1f}, TensorFlow {tf.__version__}")
    if load > (os.cpu_count() or 1):
        print("  (the machine is busy: figures are noisy; run again when it is idle)")
    if "pipeline" in results:
        print_pipeline(results["pipeline"], args.examples)
    if "overhead" in results:
        print_overhead(results["overhead"], args.chunks * args.rounds)
    return 0


def print_pipeline(pipeline: dict[str, float], examples: int) -> None:
    print(
        f"input pipeline, {examples} JPEG {IMAGE_SIZE}x{IMAGE_SIZE} TFRecords (decode, resize to {RESIZED}, "
        f"random {CROP}x{CROP} crop, flip, normalize), batch 128, examples/s:"
    )
    for when in ("first_epoch", "later_epochs", "overall"):
        trainer, naive = pipeline[f"trainer_{when}"], pipeline[f"naive_{when}"]
        label = when.replace("_", " ")
        print(f"  {label:13s} trainer {trainer:8.0f}   naive {naive:8.0f}   speed-up {trainer / naive:4.1f}x")


def print_overhead(overhead: dict[str, Any], chunks: int) -> None:
    print(f"trainer overhead, digits-cnn, batch 64, {overhead['steps']} steps per side in {chunks} chunks:")
    print(f"  bare model.fit   {overhead['bare_fit_examples_per_second']:8.0f} examples/s (fastest chunk)")
    print(f"  trainer loop     {overhead['trainer_examples_per_second']:8.0f} examples/s (fastest chunk)")
    print(
        f"  overhead         {overhead['overhead_percent']:+.1f}% fastest chunks, "
        f"{overhead['median_overhead_percent']:+.1f}% median chunks"
    )
    print(f"  one checkpoint   {overhead['checkpoint_seconds'] * 1000:.0f} ms (every 200 steps by default)")
    budget = f"{SPOT_BUDGET_SECONDS:.0f} s"
    print(f"  SIGTERM checkpoint (first save, optimizer state included) against the {budget} spot budget:")
    for name, seconds in overhead["sigterm_checkpoint"].items():
        print(f"    {name:14s} {seconds:5.2f} s  ({seconds / SPOT_BUDGET_SECONDS:.1%} of the budget)")
    print("  export for serving (SavedModel + model.json, once at the end of a run), untrained weights:")
    for name, cost in overhead["export"].items():
        print(
            f"    {name:14s} {cost['seconds']:5.2f} s  {cost['megabytes']:5.2f} MB  "
            f"({cost['parameters'] / 1e6:.2f}M parameters)"
        )


if __name__ == "__main__":
    sys.exit(main())
