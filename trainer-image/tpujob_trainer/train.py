"""The training run: strategy, data, model, checkpoints, the step loop, evaluation, summary.

The loop is ours rather than `model.fit`'s so that it can (1) stop at an exact step when
SIGTERM arrives, agreed by every worker, and save a checkpoint there; (2) resume at that
exact step; (3) measure the time spent waiting for input apart from compute. Each step
still runs Keras's own `model.train_step`, so custom models behave as they do in `fit`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from tpujob_trainer import constants as c
from tpujob_trainer import data
from tpujob_trainer.cluster import StrategyChoice, choose_strategy
from tpujob_trainer.config import ConfigError, TrainerConfig, WorkerEnv
from tpujob_trainer.export import export_after_training
from tpujob_trainer.metrics import TrainerMetrics
from tpujob_trainer.models import build_model, resolve_builder
from tpujob_trainer.progress import Progress
from tpujob_trainer.sources import DataSource, open_source
from tpujob_trainer.strategy import build_strategy, detect_accelerators
from tpujob_trainer.termination import StackDumpOnSigterm

log = logging.getLogger(__name__)


def hang(step: int) -> None:
    """As a collective that never returns: no step, no exit on SIGTERM (its handler runs, the wait goes on);
    only SIGKILL ends it. Every thread's stack is dumped on SIGTERM (StackDumpOnSigterm)."""
    log.warning("fault injection (--hang-at-step): hanging at step %d until killed", step)
    forever = threading.Event()
    while True:
        forever.wait()


class StopSignal:
    """Remembers the first SIGTERM or SIGINT; the step loop stops at the next step boundary. With a stack
    dumper (termination.StackDumpOnSigterm), SIGTERM also dumps every thread's stack first."""

    def __init__(self, dump: StackDumpOnSigterm | None = None) -> None:
        self.signal_number = 0
        self.dump = dump

    @property
    def requested(self) -> bool:
        return self.signal_number != 0

    def install(self) -> None:
        if self.dump is not None:
            self.dump.unregister()
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        if self.dump is not None:
            self.dump.register()

    def _handle(self, signal_number: int, _frame: FrameType | None) -> None:
        if self.signal_number == signal.SIGINT and signal_number == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C does not wait for the checkpoint
        log.warning(
            "received %s: stopping at the next step and saving a checkpoint",
            signal.Signals(signal_number).name,
        )
        self.signal_number = signal_number


@dataclass
class Summary:
    status: str = "failed"  # succeeded | preempted | interrupted | failed
    exit_code: int = c.EXIT_CODE_FAILED
    strategy: str = ""
    strategy_reason: str = ""
    worker_id: int = 0
    workers: int = 1
    replicas: int = 1
    model: str = ""
    data: str = ""
    global_batch_size: int = 0
    start_step: int = 0
    final_step: int = 0
    target_steps: int = 0
    examples: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    examples_per_second: float = 0.0
    input_wait_seconds: float = 0.0
    final_loss: float | None = None
    test_accuracy: float | None = None
    checkpoint: str | None = None
    checkpoints_saved: int = 0
    # For goodput accounting (Unix times, seconds): when the run began, took its first step, last saved.
    started_at: float = 0.0
    first_step_at: float | None = None
    ended_at: float = 0.0
    checkpoint_step: int | None = None  # the step of the last checkpoint saved or resumed from
    checkpoint_at: float | None = None  # when that checkpoint was saved by this run (None: resumed)
    # When the checkpoint this run resumed from was saved (by an earlier run): the operator's measure of
    # what an earlier attempt that left no progress line lost (status/goodput.py).
    resumed_checkpoint_at: float | None = None
    checkpoint_save_seconds: float = 0.0
    checkpoint_restore_seconds: float = 0.0
    # The SavedModel worker 0 wrote for serving (--export-dir), and a line of Python that loads it.
    export_dir: str | None = None
    export_hint: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_steps(config: TrainerConfig, train_examples: int | None) -> int:
    """--steps as given, or enough steps for --epochs passes over the training split."""
    if config.steps is not None:
        return config.steps
    assert config.epochs is not None
    if train_examples is None:
        raise ConfigError(f"--epochs: the size of --data {config.data} is unknown; give --steps instead")
    return math.ceil(config.epochs * train_examples / config.batch_size)


def examples_fed_per_step(choice: StrategyChoice, global_batch_size: int, workers: WorkerEnv) -> int:
    # MultiWorkerMirrored: every worker feeds its share. Otherwise one client feeds every replica.
    return global_batch_size // workers.num_workers if choice.kind == "multi-worker" else global_batch_size


class Checkpoints:
    """Saves to checkpoint_dir and resumes from its latest checkpoint.

    With MultiWorkerMirroredStrategy every worker must save (saving can run collectives);
    only worker 0's copy is kept, the others write to a scratch directory and delete it.
    """

    def __init__(self, directory: str | None, checkpoint: tf.train.Checkpoint, workers: WorkerEnv) -> None:
        self.directory = directory
        self.checkpoint = checkpoint
        self.manager: tf.train.CheckpointManager | None = None
        self.saved = 0
        self.last_path: str | None = None
        self.last_step: int | None = None
        self.last_saved_at: float | None = None  # Unix time
        self.restored_saved_at: float | None = None  # when the checkpoint restored was saved (Unix time)
        self.save_seconds = 0.0
        self.restore_seconds = 0.0
        self.scratch: str | None = None
        if directory:
            write_to = (
                directory
                if workers.worker_id == 0
                else os.path.join(directory, f".worker-{workers.worker_id}")
            )
            self.scratch = None if workers.worker_id == 0 else write_to
            self.manager = tf.train.CheckpointManager(
                checkpoint, write_to, max_to_keep=3, checkpoint_name="ckpt"
            )

    def restore_latest(self) -> str | None:
        started = time.perf_counter()
        latest = tf.train.latest_checkpoint(self.directory) if self.directory else None
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            self.last_path = latest
            self.restored_saved_at = saved_at(self.directory, latest)
            self.restore_seconds += time.perf_counter() - started
        return latest

    def save(self, step: int, metrics: TrainerMetrics) -> None:
        if self.manager is None:
            return
        started = time.perf_counter()
        path = self.manager.save(checkpoint_number=step)
        metrics.checkpoint_save_duration.observe(time.perf_counter() - started)
        metrics.last_checkpoint_step.set(step)
        metrics.last_checkpoint_timestamp.set(time.time())
        self.save_seconds += time.perf_counter() - started
        self.last_step, self.last_saved_at = step, time.time()
        if self.scratch:
            tf.io.gfile.rmtree(self.scratch)
        else:
            self.last_path = path
        self.saved += 1
        log.info("checkpoint at step %d: %s (%.2fs)", step, path, time.perf_counter() - started)


def saved_at(directory: str | None, path: str) -> float | None:
    """When the checkpoint at `path` was saved (Unix time): from the checkpoint state CheckpointManager
    keeps (all_model_checkpoint_timestamps, set at each save), else the time its index file was written."""
    try:
        state = tf.train.get_checkpoint_state(directory) if directory else None
        if state is not None:
            name = os.path.basename(path)
            for kept, timestamp in zip(
                state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps, strict=False
            ):
                if os.path.basename(kept) == name:
                    return float(timestamp)
        return float(tf.io.gfile.stat(path + ".index").mtime_nsec) / 1e9
    except (tf.errors.OpError, OSError, ValueError):
        return None


class ProgressReport(Protocol):
    """Where the step loop reports progress while training (cli: the termination log's progress line)."""

    def due(self, force: bool = False) -> bool: ...

    def write(self, summary: Summary) -> None: ...


def run(
    config: TrainerConfig,
    workers: WorkerEnv,
    metrics: TrainerMetrics,
    stop: StopSignal,
    summary: Summary,
    report: ProgressReport | None = None,
) -> None:
    """Train to the target step or until stopped, filling in `summary` as it goes (so a failure
    still reports how far it got, and `report` sees it while training)."""
    started = time.time()
    summary.started_at = summary.ended_at = started
    summary.model, summary.data = config.model, config.data
    metrics.serve(config.metrics_port, config.metrics_address)

    choice = choose_strategy(config.strategy, detect_accelerators(), workers)
    log.info("strategy: %s, because %s", choice.kind, choice.reason)
    strategy = build_strategy(choice, workers, config.worker_port)
    # MultiWorkerMirrored's coordination service installs its own SIGTERM handler, which swallows
    # the signal: take it back, or a preempted worker would train on until it is killed.
    stop.install()
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise ConfigError(f"--batch-size: {config.batch_size} is not divisible by the {replicas} replicas")
    summary.strategy, summary.strategy_reason, summary.replicas = choice.kind, choice.reason, replicas
    summary.global_batch_size = config.batch_size
    metrics.info.labels(strategy=choice.kind, model=config.model, data=config.data).set(1)

    source = open_source(config)
    total_steps = target_steps(config, source.train_examples)
    with strategy.scope():
        model = build_model(config.model, source.input_shape, source.num_classes, config.learning_rate)
        # What fit() does before its first step: create metric and loss state outside the replica
        # function, where tf.distribute allows variable creation.
        per_replica = config.batch_size // replicas
        example_shape = tuple(1 if size is None else size for size in source.input_shape)
        model._symbolic_build(
            data_batch=(
                np.zeros((per_replica, *example_shape), source.model_input_dtype),
                np.zeros((per_replica,), np.int32),
            )
        )
    checkpoints = Checkpoints(
        config.checkpoint_dir, tf.train.Checkpoint(model=model, optimizer=model.optimizer), workers
    )
    if not config.checkpoint_dir:
        log.warning("no checkpoint dir (--checkpoint-dir / %s): a restart starts over", c.ENV_CHECKPOINT_DIR)
    resumed_from = checkpoints.restore_latest()
    start_step = int(model.optimizer.iterations.numpy())
    if resumed_from:
        log.info("resumed from %s at step %d", resumed_from, start_step)
    summary.start_step = summary.final_step = start_step
    if resumed_from:
        summary.checkpoint_step = start_step
        summary.checkpoint_restore_seconds = round(checkpoints.restore_seconds, 3)
        summary.resumed_checkpoint_at = checkpoints.restored_saved_at
    summary.target_steps = total_steps
    metrics.target_steps.set(total_steps)
    metrics.global_step.set(start_step)
    log.info(
        "training %s on %s: steps %d -> %d, global batch %d over %d replica(s)",
        config.model,
        source.description,
        start_step,
        total_steps,
        config.batch_size,
        replicas,
    )

    dataset = strategy.distribute_datasets_from_function(
        lambda context: source.train(context, context.get_per_replica_batch_size(config.batch_size))
    )
    loop = StepLoop(model, strategy, metrics, examples_fed_per_step(choice, config.batch_size, workers))
    progress = Progress(config.progress, is_chief=workers.worker_id == 0)

    # Fault injection (--hang-at-step): the first attempt hangs there; the restarted one trains through.
    hang_at = config.hang_at_step if os.environ.get(c.ENV_ATTEMPT, "0") == "0" else 0

    def on_step(step: int, saved: bool) -> None:
        hangs = bool(hang_at) and step >= hang_at
        if report is not None and report.due(force=saved or hangs):
            summary.final_step = max(summary.final_step, step)
            summary.first_step_at = loop.first_step_at
            summary.input_wait_seconds = round(loop.input_wait_seconds, 3)
            _checkpoint_facts(summary, checkpoints)
            report.write(summary)
        if hangs:
            hang(step)  # its progress line says how far it got

    loop.on_step = on_step
    on_step(start_step, True)  # before the first step: a run killed in its first steps is accounted too
    try:
        step = loop.run(iter(dataset), start_step, total_steps, stop, checkpoints, config, progress)
    finally:
        summary.first_step_at = loop.first_step_at
        summary.final_step = max(summary.final_step, loop.step_reached)
        _checkpoint_facts(summary, checkpoints)
    progress.close()

    summary.final_step = step
    summary.examples = loop.examples
    summary.train_seconds = round(loop.train_seconds, 3)
    summary.input_wait_seconds = round(loop.input_wait_seconds, 3)
    summary.examples_per_second = round(loop.examples / loop.train_seconds, 1) if loop.train_seconds else 0.0
    summary.final_loss = loop.last_loss
    if step > start_step or not resumed_from:
        checkpoints.save(step, metrics)
    summary.checkpoint, summary.checkpoints_saved = checkpoints.last_path, checkpoints.saved
    _checkpoint_facts(summary, checkpoints)

    if loop.stopped_by_signal:
        interrupted = stop.signal_number == signal.SIGINT
        summary.status = "interrupted" if interrupted else "preempted"
        summary.exit_code = c.EXIT_CODE_INTERRUPTED if interrupted else c.EXIT_CODE_PREEMPTED
    else:
        if config.evaluate and source.test is not None and source.test_examples:
            summary.test_accuracy = evaluate(model, strategy, source, config.batch_size, workers)
            metrics.test_accuracy.set(summary.test_accuracy)
            log.info("test accuracy: %.4f on %d examples", summary.test_accuracy, source.test_examples)
        if config.export_dir:
            exported = export_after_training(
                model,
                config.export_dir,
                source,
                workers,
                strategy,
                multi_worker=choice.kind == "multi-worker",
                rebuild=lambda: resolve_builder(config.model)(tuple(source.input_shape), source.num_classes),
                step=step,
                metrics={} if summary.test_accuracy is None else {"test_accuracy": summary.test_accuracy},
                details={"model": config.model, "data": config.data, "strategy": choice.kind},
            )
            if exported is not None:
                summary.export_dir, summary.export_hint = exported.directory, exported.load_hint
        summary.status, summary.exit_code = "succeeded", c.EXIT_CODE_SUCCEEDED
    summary.wall_seconds = round(time.time() - started, 3)
    summary.ended_at = time.time()


def _checkpoint_facts(summary: Summary, checkpoints: Checkpoints) -> None:
    summary.checkpoint_save_seconds = round(checkpoints.save_seconds, 3)
    if checkpoints.last_step is not None:
        summary.checkpoint_step, summary.checkpoint_at = checkpoints.last_step, checkpoints.last_saved_at


# A stop vote outweighs the save votes of any number of replicas (see StepLoop.run).
STOP_VOTE = 1e6


class StepLoop:
    def __init__(
        self, model: Any, strategy: tf.distribute.Strategy, metrics: TrainerMetrics, examples_per_step: int
    ) -> None:
        self.metrics = metrics
        self.model = model
        self.examples_per_step = examples_per_step
        self.examples = 0
        self.train_seconds = 0.0
        self.input_wait_seconds = 0.0
        self.last_loss: float | None = None
        self.stopped_by_signal = False
        self.first_step_at: float | None = None  # Unix time the first step of this run ended
        self.step_reached = 0
        # Called after every step with (step, whether a checkpoint was just saved).
        self.on_step: Callable[[int, bool], None] = lambda step, saved: None
        self._step = _distributed_train_step(model, strategy)

    def run(
        self,
        iterator: Any,
        step: int,
        total_steps: int,
        stop: StopSignal,
        checkpoints: Checkpoints,
        config: TrainerConfig,
        progress: Progress,
    ) -> int:
        m = self.metrics
        # The votes, made once: a new tensor every step costs time for nothing. Their sum over every
        # replica says what all do after this step: stop (any vote of STOP_VOTE), save a checkpoint (any
        # worker's --checkpoint-interval-seconds elapsed: all save at the same step, saving runs
        # collectives), or go on. STOP_VOTE exceeds any number of save votes.
        vote_stop, vote_save, vote_go_on = tf.constant(STOP_VOTE), tf.constant(1.0), tf.constant(0.0)
        interval = config.checkpoint_interval_seconds
        last_save = time.monotonic()
        window_started, window_examples = time.perf_counter(), 0
        while step < total_steps:
            step_started = time.perf_counter()
            batch = next(iterator)
            input_ready = time.perf_counter()
            save_due = interval > 0 and time.monotonic() - last_save >= interval
            vote = vote_stop if stop.requested else vote_save if save_due else vote_go_on
            logs, stop_votes = self._step(batch, vote)
            loss = float(logs["loss"])  # also waits for the step to finish, so the timing is honest
            step_done = time.perf_counter()

            step += 1
            self.step_reached = step
            if self.first_step_at is None:
                self.first_step_at = time.time()
            self.examples += self.examples_per_step
            self.train_seconds += step_done - step_started
            self.input_wait_seconds += input_ready - step_started
            self.last_loss = loss
            window_examples += self.examples_per_step
            m.global_step.set(step)
            m.steps.inc()
            m.examples.inc(self.examples_per_step)
            m.step_duration.observe(step_done - step_started)
            m.input_wait.inc(input_ready - step_started)

            votes = float(stop_votes)
            if votes >= STOP_VOTE:  # any worker was signalled: all stop at this same step
                self.stopped_by_signal = True
                break
            saved = (votes > 0 or step % config.checkpoint_every_steps == 0) and step < total_steps
            if saved:
                checkpoints.save(step, m)
                last_save = time.monotonic()
            self.on_step(step, saved)
            if step % config.log_every_steps == 0 or step == total_steps:
                rate = window_examples / max(step_done - window_started, 1e-9)
                m.examples_per_second.set(rate)
                m.loss.set(loss)
                progress.update(step, total_steps, loss=loss, examples_per_second=rate)
                self.model.reset_metrics()  # the reported loss is the mean since the last report
                window_started, window_examples = time.perf_counter(), 0
        return step


def _distributed_train_step(model: Any, strategy: tf.distribute.Strategy) -> Any:
    def replica_step(batch: Any, stop_vote: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        logs = model.train_step(batch)
        # Piggyback the stop decision on the step: a sum over every replica of every worker.
        # (tf.identity: MultiWorkerMirrored cannot all-reduce the step function's argument itself.)
        votes = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.identity(stop_vote)
        )
        return logs, votes

    # As fit() does: the whole distributed step is one function, with XLA when the model allows it.
    @tf.function(reduce_retracing=True, jit_compile=bool(model.jit_compile))
    @tf.autograph.experimental.do_not_convert
    def step(batch: Any, stop_vote: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        per_replica = strategy.run(replica_step, args=(batch, stop_vote))
        # Logging needs one value; the first local replica's is as good as any.
        first: tuple[dict[str, tf.Tensor], tf.Tensor] = tf.nest.map_structure(
            lambda value: strategy.experimental_local_results(value)[0], per_replica
        )
        return first

    return step


def evaluate(
    model: Any,
    strategy: tf.distribute.Strategy,
    source: DataSource,
    global_batch_size: int,
    workers: WorkerEnv,
) -> float:
    assert source.test is not None and source.test_examples
    num_pipelines = workers.num_workers
    steps = data.evaluation_steps(source.test_examples, global_batch_size, num_pipelines)
    local_replicas = strategy.num_replicas_in_sync // num_pipelines
    test = source.test

    def pipeline(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.evaluation_pipeline(
            test(),
            batch_size=context.get_per_replica_batch_size(global_batch_size),
            batches=steps * local_replicas,
            num_pipelines=context.num_input_pipelines,
            pipeline_id=context.input_pipeline_id,
            normalize=source.normalize,
        )

    @tf.function
    def eval_step(batch: Any) -> Any:
        def replica_step(
            images: tf.Tensor, labels: tf.Tensor, weights: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor]:
            predicted = tf.argmax(model(images, training=False), axis=-1, output_type=tf.int32)
            correct = tf.cast(tf.equal(predicted, tf.cast(labels, tf.int32)), tf.float32)
            return tf.reduce_sum(correct * weights), tf.reduce_sum(weights)

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)

    correct = counted = 0.0
    for batch in strategy.distribute_datasets_from_function(pipeline):
        batch_correct, batch_counted = eval_step(batch)
        correct += float(batch_correct)
        counted += float(batch_counted)
    return round(correct / counted, 4) if counted else 0.0


def print_summary(summary: Summary, summary_file: str | None) -> None:
    text = json.dumps(summary.as_dict(), sort_keys=True)
    print(text, file=sys.stdout, flush=True)
    if summary_file:
        directory = os.path.dirname(summary_file)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(summary_file, "w") as handle:
            handle.write(text + "\n")
