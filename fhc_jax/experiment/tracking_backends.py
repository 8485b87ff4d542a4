"""The two trackers of --logger: TensorBoard (event files through tensorboardX) and Weights &
Biases, each behind the :class:`~fhc_jax.experiment.tracking.Tracker` protocol; imported lazily
by :mod:`fhc_jax.experiment.tracking` through its TRACKERS table.
"""

from __future__ import annotations

import json
import math
import netrc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

#: W&B project when ``WANDB_PROJECT`` is not set
DEFAULT_PROJECT = "fhc_jax"


#: per-step values handed to :meth:`Tracker.log_metrics`: group (``seed_0``, ``speed``) -> name -> value
StepMetrics = Mapping[str, Mapping[str, float]]


#: wandb.Settings: no console capture, no system metrics or metadata, no git/code/requirements
#: capture, no output; short timeouts (fields unknown to the installed wandb are left out)
WANDB_SETTINGS: dict[str, Any] = {
    "console": "off",
    "silent": True,
    "quiet": True,
    "show_info": False,
    "show_warnings": False,
    "disable_git": True,
    "save_code": False,
    "disable_job_creation": True,
    "init_timeout": 20.0,
    "x_disable_stats": True,
    "x_disable_meta": True,
    "x_disable_machine_info": True,
    "x_save_requirements": False,
    "x_disable_viewer": True,
    "finish_timeout": 60.0,
}


def flatten_scalars(tree: Any, prefix: str = "", *, strings: bool = False) -> dict[str, Any]:
    """Numeric leaves of nested dicts/lists as ``prefix/key/0/...`` -> float (booleans as 0/1;
    None and non-finite values skipped); with ``strings`` also the string leaves."""
    out: dict[str, Any] = {}

    def walk(x: Any, path: str) -> None:
        if isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{path}/{k}" if path else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}/{i}" if path else str(i))
        elif isinstance(x, np.ndarray):
            walk(x.tolist(), path)
        elif isinstance(x, (bool, np.bool_)):
            out[path] = float(bool(x))
        elif isinstance(x, (int, float, np.integer, np.floating)):
            if math.isfinite(float(x)):
                out[path] = float(x)
        elif strings and isinstance(x, str):
            out[path] = x

    walk(tree, prefix)
    return out


def _summary_payload(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "machine"}


#: summary.json aggregates shown in TensorBoard's HParams dashboard next to the settings
HPARAM_METRICS = (
    "summary/aggregate/feasible_seeds",
    "summary/aggregate/exact_reward/mean",
    "summary/aggregate/exact_reward/min",
    "summary/aggregate/worst/fraction_of_optimum",
    "summary/aggregate/worst/relative_excess",
)


class TensorBoardTracker:
    """Event files in ``directory/tensorboard[/subdir]`` through ``tensorboardX.SummaryWriter``.

    One event per iteration holds every seed's values (one ``Summary`` with many values: a
    tenth of the cost of one ``add_scalar`` per value). ``start_iteration`` > 0 (a resumed run)
    sets ``purge_step`` so TensorBoard drops what an interrupted process logged after its last
    checkpoint.
    """

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        group: str | None = None,
        subdir: str | None = None,
        start_iteration: int = 0,
    ):
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary

        self._summary = Summary
        self.log_dir = Path(directory) / "tensorboard" / (subdir or "")
        self._writer = SummaryWriter(
            logdir=str(self.log_dir),
            max_queue=1000,
            flush_secs=30,
            purge_step=start_iteration + 1 if start_iteration > 0 else None,
        )
        self._hparams = False

    def _add(self, values: Mapping[str, float], step: int | None) -> None:
        summary = self._summary(value=[self._summary.Value(tag=t, simple_value=v) for t, v in values.items()])
        self._writer._get_file_writer().add_summary(summary, step)

    def log_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
        text = json.dumps(config, indent=2, default=str)
        self._writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)
        if hparams:
            from tensorboardX.summary import hparams as hparams_summary

            exp, ssi, _ = hparams_summary(dict(hparams), {k: 0.0 for k in HPARAM_METRICS})
            fw = self._writer._get_file_writer()
            fw.add_summary(exp)
            fw.add_summary(ssi)
            self._hparams = True

    def log_metrics(self, step: int, metrics: StepMetrics) -> None:
        self._add({f"{g}/{k}": v for g, d in metrics.items() for k, v in d.items()}, step)

    def log_summary(self, summary: Mapping[str, Any], step: int | None) -> None:
        payload = _summary_payload(summary)
        values = flatten_scalars(payload, "summary")
        if values:
            self._add(values, step)
        text = json.dumps(payload, indent=2, default=str)
        self._writer.add_text("summary", "\n".join("    " + line for line in text.splitlines()), step)
        if self._hparams:
            from tensorboardX.summary import hparams as hparams_summary

            _, _, sei = hparams_summary({}, {})
            self._writer._get_file_writer().add_summary(sei)

    def log_images(self, paths: Sequence[Path], step: int | None) -> None:
        from PIL import Image

        for p in paths:
            with Image.open(p) as img:
                arr = np.asarray(img.convert("RGB"))
            self._writer.add_image(f"plots/{Path(p).stem}", arr, step, dataformats="HWC")

    def close(self) -> None:
        self._writer.close()


def _netrc_has(host: str) -> bool:
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> str | None:
    """The ``mode`` for ``wandb.init``: None (W&B decides) when ``WANDB_MODE`` is set or
    credentials are configured (``WANDB_API_KEY``, or a netrc entry for the host of
    ``WANDB_BASE_URL``, default api.wandb.ai); ``"offline"`` otherwise."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    return None if _netrc_has(host) else "offline"


class WandbTracker:
    """A W&B run in ``directory/wandb`` (offline unless credentials are configured:
    :func:`wandb_mode`); ``wandb.log`` per iteration with the iteration as ``step``."""

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        group: str | None = None,
        subdir: str | None = None,
        start_iteration: int = 0,
    ):
        import wandb

        self._wandb = wandb
        fields = getattr(wandb.Settings, "model_fields", None)
        settings = {k: v for k, v in WANDB_SETTINGS.items() if fields is None or k in fields}
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            dir=str(directory),
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=name,
            group=group,
            mode=wandb_mode(),
            reinit="create_new",
            settings=wandb.Settings(**settings),
        )
        self._step: int | None = None

    def log_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
        self.run.config.update(json.loads(json.dumps(config, default=str)), allow_val_change=True)

    def log_metrics(self, step: int, metrics: StepMetrics) -> None:
        self.run.log({f"{g}/{k}": v for g, d in metrics.items() for k, v in d.items()}, step=step)
        self._step = step

    def log_summary(self, summary: Mapping[str, Any], step: int | None) -> None:
        self.run.summary.update(flatten_scalars(_summary_payload(summary), "summary", strings=True))

    def log_images(self, paths: Sequence[Path], step: int | None) -> None:
        if paths:
            images = {f"plots/{Path(p).stem}": self._wandb.Image(str(p)) for p in paths}
            at = step if step is not None else self._step
            self.run.log(images, **({} if at is None else {"step": max(at, self._step or 0)}))

    def close(self) -> None:
        self.run.finish()
