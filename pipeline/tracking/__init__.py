"""Tracking: MLflow runs for every stage execution, journaled by the stage and
replayed into MLflow by :func:`sync`.

Layout: one experiment per study (named after it), a parent run per stage execution (named after
the DVC stage), a child run per training configuration. Every run carries the provenance tags of
:func:`pipeline.provenance.run_tags`. MLflow is an index over the DVC outputs, which stay canonical: with
``tracking.on_error: warn`` a tracking failure warns instead of failing (the stage, or the sync).

Modes, from ``TRAINSCAPE_TRACKING``:

* ``journal`` (the default): the stage process never imports MLflow (importing its client and SQL
  store and creating runs cost about 3.7 s of every stage). The :class:`Tracker` records every call
  it would make in a journal, the folder ``<store root>/.trainscape/journal/<stage>-<key>/``: numbered
  segments, each written atomically (at the start, as each child run ends, after each part of a
  resumable unit, at exit, FAILED on an exception), and the logged files hard-linked as they were
  when logged. Each run gets a key, a uuid4 hex like an MLflow run id: ``run_id`` returns it, the
  stage's run record (:mod:`pipeline.tracking.records`, never a DVC output) links the outputs to it as
  ``run_key`` (the claims stage's too: ``claims.json`` holds only what its inputs determine). :func:`sync` (the
  gallery stage, ``make ui``, ``python -m pipeline.tracking sync``) replays the journals into MLflow
  with their original times, tags each run ``trainscape.run_key=<key>`` and keeps the map key → run
  id that :func:`resolve` reads (the gallery's links resolve through it). ``sync --follow``
  (:func:`follow`, which ``make ui`` keeps running beside the UI) replays the journals of running
  stages too, as they grow: each child run shows as it ends, the parent RUNNING until its stage
  ends. Each journal's ``replayed.json`` says how much of it is in MLflow, so every pass, and a plain
  sync after them, replays only what is new.
* ``direct``: every call goes to MLflow from the stage itself, run ids are MLflow's (for debugging).
* ``off`` (also ``0``, ``false``, ``no``; or ``tracking.enabled: false``): nothing is recorded.

Store: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo>/mlflow.db``; artifacts always go to
``<repo>/mlartifacts/<study>`` (never the current directory, which DVC experiments move). ``<repo>``
is ``DVC_ROOT`` when DVC sets it, so queued experiments journal and log into the real repository.
A journal replays into the store its stage was pointed at. ``TRAINSCAPE_JOURNAL`` moves the
journal folder (the tests keep theirs in a temporary folder).

The package, by job: :mod:`~pipeline.tracking.tracker` (what a stage logs through), :mod:`~pipeline.tracking.journal`
(the journal's files), :mod:`~pipeline.tracking.store` (MLflow's client, imported nowhere else),
:mod:`~pipeline.tracking.sync` (journals into MLflow; ``python -m pipeline.tracking``) and
:mod:`~pipeline.tracking.records` (which run made the outputs on disk). No output depends on any of it
(:data:`pipeline.graph.BOOKKEEPING`).
"""

from pipeline.tracking.journal import JOURNAL_ENV, journal_dir, new_key
from pipeline.tracking.store import EXPERIMENT_TAGS, PARENT_TAG, RUN_KEY_TAG, artifact_location, tracking_uri
from pipeline.tracking.sync import SyncResult, follow, pending, resolve, run_map, sync
from pipeline.tracking.tracker import (
    MODE_ENV,
    ChildRun,
    RunLogger,
    Series,
    Tracker,
    dataset_inputs,
    step_timestamps,
    tracking_disabled_by_env,
    tracking_mode,
)

__all__ = ["EXPERIMENT_TAGS", "JOURNAL_ENV", "MODE_ENV", "PARENT_TAG", "RUN_KEY_TAG", "ChildRun", "RunLogger",
           "Series", "SyncResult", "Tracker", "artifact_location", "dataset_inputs", "follow", "journal_dir",
           "new_key", "pending", "resolve", "run_map", "step_timestamps", "sync", "tracking_disabled_by_env",
           "tracking_mode", "tracking_uri"]
