"""Export for serving: after a successful run, worker 0 writes the model as a SavedModel.

The export directory (local path or gs://) holds the SavedModel (`saved_model.pb`, `variables/`)
and `model.json` beside it: what the model takes and returns, the step, the test metrics and the
TensorFlow version. `model.json` is written last, so its presence means the export is complete.

Two signatures take the examples as the dataset decodes them (uint8 pixels for TFRecords, int32
tokens for sequences), with any batch size and, for sequences, any length; the normalization the
training pipeline applied is part of the graph. Both return `scores` (one per class, the model's
output) and `classes` (the arg max).

- `serving_default`: plain TensorFlow ops, for CPU and GPU serving (TF Serving,
  `tf.saved_model.load`) with nothing else installed.
- `serving_tpu`: the same, with the model's part in `tpu_func`, a `tf.function` with
  `jit_compile=True` saved under the function alias "tpu_func", which is how the Cloud TPU
  Inference Converter is told what to put on the TPU. Sequences are first padded to the training
  buckets' lengths, so the TPU compiles a few static shapes rather than one per request.

Variables: whatever the strategy (TPUStrategy, MultiWorkerMirroredStrategy, Mirrored, the default),
the trained weights are read once into host memory and set on a fresh copy of the model built
outside any strategy on this host's CPU, so the SavedModel holds plain variables and loads on a
CPU with TensorFlow alone (no tpujob_trainer, no Keras objects).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tpujob_trainer.config import WorkerEnv
from tpujob_trainer.sources import DataSource

log = logging.getLogger(__name__)

SIGNATURE = "serving_default"
TPU_SIGNATURE = "serving_tpu"
TPU_FUNCTION_ALIAS = "tpu_func"
METADATA_FILE = "model.json"
FORMAT = "tpujob-export/v1"
# What an export writes: an earlier export's entries are removed first, nothing else is touched.
ENTRIES = ("saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra", METADATA_FILE)


@dataclass(frozen=True)
class ServingInput:
    """What the serving signatures take: one example's shape (None: any length) and dtype as the
    dataset decodes it, and the preprocessing training applied to whole batches."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str
    preprocess: Callable[[tf.Tensor], tf.Tensor] | None = None
    # Sequences: serving_tpu pads the length to the first of these that fits (or to a multiple of
    # the last), as training batches were padded.
    bucket_lengths: tuple[int, ...] = ()

    @classmethod
    def of(cls, source: DataSource) -> ServingInput:
        normalize = source.normalize
        preprocess = None
        if normalize is not None:

            def preprocess(inputs: tf.Tensor) -> tf.Tensor:
                return normalize(inputs, None)[0]

        return cls(
            name=source.input_name,
            shape=tuple(source.input_shape),
            dtype=source.example_dtype,
            preprocess=preprocess,
            bucket_lengths=source.bucket_lengths,
        )

    @property
    def model_dtype(self) -> str:
        return "float32" if self.preprocess is not None else self.dtype

    @property
    def preprocessing(self) -> str:
        if self.preprocess is None:
            return "none: the model takes the examples as they are"
        return "included: the signatures normalize the examples as the training pipeline did"


@dataclass(frozen=True)
class Exported:
    directory: str
    seconds: float
    size_bytes: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def load_hint(self) -> str:
        return load_hint(self.directory)


def load_hint(directory: str) -> str:
    """One line of Python that loads the export in a fresh interpreter."""
    return f"tf.saved_model.load({directory!r}).signatures[{SIGNATURE!r}]"


def export_model(
    model: keras.Model,
    directory: str,
    serving: ServingInput,
    *,
    rebuild: Callable[[], keras.Model] | None = None,
    step: int = 0,
    metrics: dict[str, float] | None = None,
    details: dict[str, Any] | None = None,
) -> Exported:
    """Write `model` (trained under any strategy) to `directory` for serving.

    `rebuild` makes an untrained model of the same architecture (the builder the trainer used);
    without it, `keras.models.clone_model` does.
    """
    started = time.perf_counter()
    host = host_cpu()
    with tf.device(host):
        plain = plain_copy(model, serving, rebuild)
        root, signatures = servable(plain, serving)
        clear(directory)
        tf.io.gfile.makedirs(directory)
        tf.saved_model.save(
            root,
            directory,
            signatures=signatures,
            options=tf.saved_model.SaveOptions(
                function_aliases={TPU_FUNCTION_ALIAS: root.tpu_func},
                # A TPU client's default device is a TPU host's server: write from this process.
                experimental_io_device=host,
            ),
        )
    num_classes = int(signatures[SIGNATURE].structured_outputs["scores"].shape[-1])
    metadata: dict[str, Any] = {
        "format": FORMAT,
        "signature": SIGNATURE,
        "inputs": [
            {"name": serving.name, "shape": [None, *serving.shape], "dtype": serving.dtype},
        ],
        "outputs": [
            {"name": "scores", "shape": [None, num_classes], "dtype": "float32"},
            {"name": "classes", "shape": [None], "dtype": "int64"},
        ],
        "preprocessing": serving.preprocessing,
        "tpu": {
            "signature": TPU_SIGNATURE,
            "function_alias": TPU_FUNCTION_ALIAS,
            "jit_compile": True,
            "bucket_lengths": list(serving.bucket_lengths),
        },
        "step": step,
        "metrics": dict(metrics or {}),
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load": load_hint(directory),
        **(details or {}),
    }
    with tf.io.gfile.GFile(os.path.join(directory, METADATA_FILE), "w") as handle:
        handle.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return Exported(directory, time.perf_counter() - started, directory_bytes(directory), metadata)


def host_cpu() -> str:
    """This process's own CPU, also when the default device is a remote TPU host's server."""
    try:
        from tensorflow.python.eager import context

        return f"{context.context().host_address_space()}/device:CPU:0"
    except Exception:  # a TensorFlow without the internal API: the default CPU will do
        return "/device:CPU:0"


def plain_copy(
    model: keras.Model, serving: ServingInput, rebuild: Callable[[], keras.Model] | None
) -> keras.Model:
    """The trained weights on a model built outside any strategy: plain variables on this host."""
    if tf.distribute.has_strategy():
        raise RuntimeError("export: call it outside strategy.scope(), where new variables are plain ones")
    weights = model.get_weights()  # distributed or TPU variables: one read into host memory
    copy = rebuild() if rebuild is not None else keras.models.clone_model(model)
    example = tuple(1 if size is None else size for size in serving.shape)
    copy(np.zeros((1, *example), serving.model_dtype), training=False)  # builds a subclassed model too
    copy.set_weights(weights)
    return copy


def servable(model: keras.Model, serving: ServingInput) -> tuple[Any, dict[str, Any]]:
    """The object to save (its variables and functions) and the signatures."""
    root = tf.Module(name="tpujob_export")
    root.model_variables = list(model.variables)  # tracked: saved with the functions that read them
    batch_shape = [None, *serving.shape]
    model_spec = tf.TensorSpec(batch_shape, serving.model_dtype)
    input_spec = tf.TensorSpec(batch_shape, serving.dtype, name=serving.name)

    def scores(model_inputs: tf.Tensor) -> tf.Tensor:
        return tf.cast(model(model_inputs, training=False), tf.float32)

    def preprocess(inputs: tf.Tensor) -> tf.Tensor:
        return serving.preprocess(inputs) if serving.preprocess is not None else inputs

    def outputs(values: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": values, "classes": tf.argmax(values, axis=-1)}

    # The TPU part: XLA-compiled, as the TPU runs it (and so known to compile before it gets there).
    root.tpu_func = tf.function(scores, input_signature=[model_spec], jit_compile=True, autograph=False)

    @tf.function(input_signature=[input_spec], autograph=False)
    def serve(inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return outputs(scores(preprocess(inputs)))

    @tf.function(input_signature=[input_spec], autograph=False)
    def serve_tpu(inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        model_inputs = preprocess(inputs)
        if serving.bucket_lengths:
            model_inputs = pad_to_bucket(model_inputs, serving.bucket_lengths)
        return outputs(root.tpu_func(model_inputs))

    root.serve, root.serve_tpu = serve, serve_tpu
    return root, {SIGNATURE: serve.get_concrete_function(), TPU_SIGNATURE: serve_tpu.get_concrete_function()}


def pad_to_bucket(tokens: tf.Tensor, bucket_lengths: tuple[int, ...]) -> tf.Tensor:
    """[batch, length] -> [batch, the first bucket length >= length, or a multiple of the last],
    zero-padded at the end."""
    length = tf.shape(tokens)[1]
    buckets = tf.constant(bucket_lengths, tf.int32)
    fitting = tf.boolean_mask(buckets, buckets >= length)
    longest = bucket_lengths[-1]
    target = tf.cond(
        tf.size(fitting) > 0,
        lambda: fitting[0],
        lambda: (length + longest - 1) // longest * longest,
    )
    return tf.pad(tokens, [[0, 0], [0, target - length]])


def clear(directory: str) -> None:
    """Remove an earlier export's entries (and only those)."""
    if not tf.io.gfile.isdir(directory):
        return
    for entry in ENTRIES:
        path = os.path.join(directory, entry)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def directory_bytes(directory: str) -> int:
    total = 0
    for parent, _directories, files in tf.io.gfile.walk(directory):
        for name in files:
            total += tf.io.gfile.stat(os.path.join(parent, name)).length
    return total


def export_after_training(
    model: keras.Model,
    directory: str,
    source: DataSource,
    workers: WorkerEnv,
    strategy: tf.distribute.Strategy,
    *,
    multi_worker: bool,
    rebuild: Callable[[], keras.Model],
    step: int,
    metrics: dict[str, float],
    details: dict[str, Any],
) -> Exported | None:
    """Worker 0 exports; with MultiWorkerMirroredStrategy the others wait for it to finish, so that
    no worker leaves the cluster while the chief still works. A failed export fails the run (exit 1):
    the restart resumes at the final step, trains nothing and exports again."""
    exported: Exported | None = None
    error: Exception | None = None
    if workers.worker_id == 0:
        try:
            exported = export_model(
                model,
                directory,
                ServingInput.of(source),
                rebuild=rebuild,
                step=step,
                metrics=metrics,
                details=details,
            )
            log.info(
                "exported for serving to %s (%.1f MB, %.2fs): %s",
                directory,
                exported.size_bytes / 1e6,
                exported.seconds,
                exported.load_hint,
            )
        except Exception as failure:  # the others must still be released before this one fails
            error = failure
    if multi_worker:
        wait_for_worker_0(strategy)
    if error is not None:
        raise RuntimeError(f"export to {directory} failed: {type(error).__name__}: {error}") from error
    return exported


def wait_for_worker_0(strategy: tf.distribute.Strategy) -> None:
    """A sum over every replica of every worker: it completes when worker 0 has reached it too."""

    @tf.function
    def everyone() -> tf.Tensor:
        ones = strategy.run(lambda: tf.identity(tf.constant(1.0)))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    everyone()
