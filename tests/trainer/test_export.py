"""Export for serving: worker 0 writes a SavedModel (+ model.json) that plain TensorFlow serves.

Every export made by a real trainer run is loaded in a new interpreter that imports only
TensorFlow and NumPy, as a serving process would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.conftest import start_trainer
from tpujob_sandbox import free_port
from tpujob_trainer import export
from tpujob_trainer.models import build_model

# Run as `python -c LOADER ARGS_JSON`: TensorFlow and NumPy only, never tpujob_trainer.
LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

args = json.loads(sys.argv[1])
path = args["export"]
loaded = tf.saved_model.load(path)
serve = loaded.signatures["serving_default"]
serve_tpu = loaded.signatures["serving_tpu"]
result = {
    "inputs": {k: [v.shape.as_list(), v.dtype.name] for k, v in serve.structured_input_signature[1].items()},
    "outputs": sorted(serve.structured_outputs),
}


def gap(a, b):
    # Absolute below 1, relative above: logits grow as a model trains.
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


if "digits" in args:
    directory = args["digits"]
    info = json.load(open(directory + "/dataset.json"))
    files = [directory + "/" + name for name in info["splits"]["test"]["files"]]
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    images, labels = [], []
    for record in tf.data.TFRecordDataset(files):
        example = tf.io.parse_single_example(record, features)
        images.append(tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), info["image_shape"]).numpy())
        labels.append(int(example["label"]))
    images, labels = np.stack(images), np.array(labels)
    result["examples"] = len(labels)
    result["accuracy"] = {}
    for size in (1, 3, 64):
        classes = np.concatenate(
            [serve(images=images[i : i + size])["classes"].numpy() for i in range(0, len(images), size)]
        )
        result["accuracy"][str(size)] = float(np.mean(classes == labels))
    batch = images[:64]
    plain = serve(images=batch)["scores"].numpy()
    # tpu_func is the model's part alone: it takes what the signature's normalization gives it.
    xla = loaded.tpu_func(tf.cast(batch, tf.float32) / info["max_value"]).numpy()
    result["xla_vs_plain"] = gap(xla, plain)
    result["tpu_signature_vs_plain"] = gap(serve_tpu(images=batch)["scores"].numpy(), plain)

if "lengths" in args:
    rng = np.random.default_rng(0)
    result["lengths"] = {}
    for length in args["lengths"]:
        tokens = rng.integers(1, 64, size=(3, length)).astype(np.int32)
        scores = serve(tokens=tokens)["scores"].numpy()
        padded = serve(tokens=np.pad(tokens, [[0, 0], [0, 9]]))["scores"].numpy()
        # A sequence of one class's tokens only (t % 4 == class) is that class.
        pure = np.stack([(rng.integers(1, 16, size=length) * 4 + c).astype(np.int32) for c in range(4)])
        result["lengths"][str(length)] = {
            "shape": list(scores.shape),
            "padded_vs_plain": gap(padded, scores),
            "tpu_signature_vs_plain": gap(serve_tpu(tokens=tokens)["scores"].numpy(), scores),
            "pure_classes": serve(tokens=pure)["classes"].numpy().tolist(),
        }

saved_model = saved_model_pb2.SavedModel()
with tf.io.gfile.GFile(path + "/saved_model.pb", "rb") as handle:
    saved_model.ParseFromString(handle.read())
meta_graph = saved_model.meta_graphs[0]
aliases = dict(meta_graph.meta_info_def.function_aliases)
result["aliases"] = aliases
result["xla_must_compile"] = {
    f.signature.name: f.attr["_XlaMustCompile"].b for f in meta_graph.graph_def.library.function
    if f.signature.name in aliases
}
result["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tpujob_trainer", "tpujob"))
print(json.dumps(result))
"""


def load_in_a_new_interpreter(cwd: Path, **args: Any) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run(
        [sys.executable, "-c", LOADER, json.dumps(args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    loaded: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["imported"] == [], "the loader must need TensorFlow only"
    return loaded


def trainer_env(digits_dir: Path, **settings: str) -> dict[str, str]:
    return {
        "TPUJOB_DATA_DIR": str(digits_dir),
        "TPUJOB_METRICS_PORT": "0",
        "TPUJOB_PROGRESS": "log",
        **settings,
    }


@pytest.fixture(scope="module")
def one_worker(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """digits-cnn trained briefly on one worker (default strategy), exported, loaded elsewhere."""
    directory = tmp_path_factory.mktemp("one-worker")
    trainer = start_trainer(
        directory,
        "trainer",
        ["--steps", "60", "--export-dir", str(directory / "export")],
        trainer_env(digits_dir),
    )
    assert trainer.wait(timeout=300) == 0, trainer.log()[-3000:]
    summary = trainer.summary()
    loaded = load_in_a_new_interpreter(directory, export=str(directory / "export"), digits=str(digits_dir))
    return SimpleNamespace(directory=directory, summary=summary, loaded=loaded)


@pytest.fixture(scope="module")
def two_workers(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The same on two local workers: MultiWorkerMirroredStrategy, worker 0 exports."""
    directory = tmp_path_factory.mktemp("two-workers")
    hostnames = f"localhost:{free_port()},localhost:{free_port()}"
    workers = [
        start_trainer(
            directory,
            f"worker{index}",
            ["--steps", "40", "--export-dir", str(directory / "export")],
            trainer_env(digits_dir, TPU_WORKER_ID=str(index), TPU_WORKER_HOSTNAMES=hostnames),
        )
        for index in (0, 1)
    ]
    codes = [worker.wait(timeout=300) for worker in workers]
    assert codes == [0, 0], [worker.log()[-2000:] for worker in workers]
    summaries = [worker.summary() for worker in workers]
    loaded = load_in_a_new_interpreter(directory, export=str(directory / "export"), digits=str(digits_dir))
    return SimpleNamespace(directory=directory, summaries=summaries, loaded=loaded)


def assert_serves_the_reported_accuracy(loaded: dict[str, Any], summary: dict[str, Any]) -> None:
    assert loaded["inputs"] == {"images": [[None, 8, 8, 1], "uint8"]}
    assert loaded["outputs"] == ["classes", "scores"]
    assert loaded["examples"] == 360
    for size, accuracy in loaded["accuracy"].items():
        # The trainer reports the accuracy rounded to 4 places.
        assert abs(round(accuracy, 4) - summary["test_accuracy"]) < 1e-6, (size, accuracy, summary)


@pytest.mark.slow
def test_one_worker_export_serves_the_test_split_with_the_reported_accuracy(
    one_worker: SimpleNamespace,
) -> None:
    summary = one_worker.summary
    assert (summary["status"], summary["strategy"]) == ("succeeded", "default")
    assert summary["export_dir"] == str(one_worker.directory / "export")
    hint = f"tf.saved_model.load({summary['export_dir']!r}).signatures['serving_default']"
    assert summary["export_hint"] == hint
    assert_serves_the_reported_accuracy(one_worker.loaded, summary)


@pytest.mark.slow
def test_two_worker_export_serves_the_test_split_with_the_reported_accuracy(
    two_workers: SimpleNamespace,
) -> None:
    chief, other = two_workers.summaries
    assert chief["strategy"] == other["strategy"] == "multi-worker"
    assert chief["export_dir"] == str(two_workers.directory / "export")
    assert other["export_dir"] is None  # worker 0 exports, the others only wait for it
    assert_serves_the_reported_accuracy(two_workers.loaded, chief)


@pytest.mark.slow
def test_the_tpu_function_is_aliased_xla_compiled_and_agrees_with_serving_default(
    one_worker: SimpleNamespace,
) -> None:
    loaded = one_worker.loaded
    assert loaded["aliases"] and set(loaded["aliases"].values()) == {"tpu_func"}
    assert loaded["xla_must_compile"].keys() == loaded["aliases"].keys()
    assert all(loaded["xla_must_compile"].values())  # jit_compile=True
    assert loaded["xla_vs_plain"] <= 1e-5
    assert loaded["tpu_signature_vs_plain"] <= 1e-5


@pytest.mark.slow
def test_model_json_says_what_the_export_takes_and_where_it_comes_from(one_worker: SimpleNamespace) -> None:
    summary = one_worker.summary
    metadata = json.loads((one_worker.directory / "export" / "model.json").read_text())
    assert metadata["signature"] == "serving_default"
    assert metadata["inputs"] == [{"name": "images", "shape": [None, 8, 8, 1], "dtype": "uint8"}]
    assert [output["name"] for output in metadata["outputs"]] == ["scores", "classes"]
    assert metadata["outputs"][0]["shape"] == [None, 10]
    assert metadata["step"] == summary["final_step"] == 60
    assert metadata["metrics"] == {"test_accuracy": summary["test_accuracy"]}
    assert metadata["tensorflow_version"] == tf.__version__
    assert metadata["tpu"] == {
        "signature": "serving_tpu",
        "function_alias": "tpu_func",
        "jit_compile": True,
        "bucket_lengths": [],
    }
    assert (metadata["model"], metadata["data"], metadata["strategy"]) == ("digits-cnn", "digits", "default")
    assert metadata["load"] == summary["export_hint"]


@pytest.mark.slow
def test_the_sequence_model_export_serves_any_length(tmp_path: Path) -> None:
    export_dir = tmp_path / "export"
    trainer = start_trainer(
        tmp_path,
        "sequences",
        ["--model", "sequence-cnn", "--data", "sequences", "--steps", "150", "--export-dir", str(export_dir)],
        {"TPUJOB_METRICS_PORT": "0", "TPUJOB_PROGRESS": "log"},
    )
    assert trainer.wait(timeout=300) == 0, trainer.log()[-3000:]
    summary = trainer.summary()
    assert summary["test_accuracy"] >= 0.8, summary
    metadata = json.loads((export_dir / "model.json").read_text())
    assert metadata["inputs"] == [{"name": "tokens", "shape": [None, None], "dtype": "int32"}]
    assert metadata["tpu"]["bucket_lengths"] == [16, 32, 64]

    # 12 and 40 fall in different training buckets; 100 is longer than any training sequence.
    loaded = load_in_a_new_interpreter(tmp_path, export=str(export_dir), lengths=[12, 40, 100])
    assert loaded["inputs"] == {"tokens": [[None, None], "int32"]}
    for length, served in loaded["lengths"].items():
        assert served["shape"] == [3, 4], length
        assert served["padded_vs_plain"] <= 1e-5, length  # padding (token 0) changes nothing
        assert served["tpu_signature_vs_plain"] <= 1e-5, length  # padded to a bucket, XLA-compiled
        assert served["pure_classes"] == [0, 1, 2, 3], length


def test_an_export_replaces_the_previous_one_and_leaves_other_files(tmp_path: Path) -> None:
    """In-process, untrained: the weights survive the copy, a second export overwrites the first."""
    model = build_model("digits-cnn", (8, 8, 1), 10, learning_rate=1e-3)
    serving = export.ServingInput(
        "images", (8, 8, 1), "uint8", preprocess=lambda images: tf.cast(images, tf.float32) / 16.0
    )
    directory = tmp_path / "export"
    directory.mkdir()
    (directory / "README").write_text("mine")
    export.export_model(model, str(directory), serving, step=1)
    (directory / "variables" / "stale").write_text("from an earlier export")
    exported = export.export_model(model, str(directory), serving, step=2)

    assert json.loads((directory / "model.json").read_text())["step"] == 2
    assert not (directory / "variables" / "stale").exists()
    assert (directory / "README").read_text() == "mine"
    assert exported.size_bytes > 100_000 and exported.seconds > 0
    images = np.random.default_rng(0).integers(0, 17, size=(5, 8, 8, 1)).astype(np.uint8)
    served = tf.saved_model.load(str(directory)).signatures["serving_default"](images=images)
    expected = model(images.astype(np.float32) / 16.0, training=False)
    np.testing.assert_allclose(served["scores"].numpy(), np.asarray(expected), atol=1e-5)


@pytest.mark.parametrize(("length", "padded"), [(1, 16), (16, 16), (17, 32), (64, 64), (65, 128), (130, 192)])
def test_the_tpu_signature_pads_sequences_to_a_bucket_length(length: int, padded: int) -> None:
    tokens = tf.ones((2, length), tf.int32)
    assert export.pad_to_bucket(tokens, (16, 32, 64)).shape == (2, padded)
