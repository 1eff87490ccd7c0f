"""Celery tasks. Each has a queue in ``CELERY_TASK_ROUTES`` (look-ups on "reconcile", sweeps on
"maintenance", so slow downstreams never delay the sweeps); each takes ids, re-reads the
database and exits early when the work is already done, so a redelivered or duplicated message
is harmless."""

from __future__ import annotations

import logging
import time

from celery import Task, shared_task
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from ledger import notifications
from ledger.combinations import rollouts, thresholds
from ledger.records import expire_leases
from ledger.services import audit_sealing, metrics
from ledger.services.cleanup import cleanup_expired_records
from reconcile import approved_writes, compensation_runs, services, write_conflicts
from reconcile.compensations import unsent_sagas
from reconcile.models import Heartbeat

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    soft_time_limit=settings.RECONCILE_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.RECONCILE_TASK_TIME_LIMIT,
)
def reconcile_records(self: Task, record_ids: list[int]) -> int:
    """Look up unknown records one after another (downstream, or their file) and settle each if
    possible; how many were taken. Several records share a message so that a worker receives
    and acknowledges one message for several look-ups (docs/performance.md). A record is only
    started while less than half of the message's soft time limit has passed; the rest go back
    to the broker as a new message, so that a message of slow look-ups does not run into the
    time limits."""
    began = time.monotonic()
    budget = _soft_time_limit(self) / 2
    for done, record_id in enumerate(record_ids):
        if done and time.monotonic() - began > budget:
            send_lookups(record_ids[done:])
            return done
        try:
            services.reconcile_record(record_id)
        except Exception:
            # The soft time limit past the look-up itself (which records a timeout), or a
            # database error: this record's claim lapses and the sweep takes it again; the
            # ones after it go back to the broker now, as if each had had a message of its own.
            send_lookups(record_ids[done + 1 :])
            raise
    return len(record_ids)


def _soft_time_limit(task: Task) -> float:
    """The soft limit the message carries (its publisher's settings), else the task's own."""
    carried = (task.request.timelimit or (None, None))[1]
    return float(carried or task.soft_time_limit or settings.RECONCILE_TASK_SOFT_TIME_LIMIT)


@shared_task(soft_time_limit=50, time_limit=60)
def schedule_reconciliation() -> int:
    """Enqueue a look-up for every unknown record that is due. PostgreSQL is the source of
    truth: this sweep finds everything, including records whose message a broker outage lost."""
    Heartbeat.objects.update_or_create(name=Heartbeat.SCHEDULER, defaults={"beat_at": Now()})
    ids = services.due_records(limit=settings.RECONCILE_BATCH_SIZE)
    enqueue_reconciliation(ids)
    logger.info("reconcile sweep", extra={"enqueued": len(ids)})
    return len(ids)


@shared_task(soft_time_limit=50, time_limit=60)
def sweep_expired_leases() -> int:
    """Executing records whose lease lapsed become unknown, then get looked up."""
    total = 0
    size = settings.RECONCILE_BATCH_SIZE
    while batch := expire_leases(batch_size=size):  # each batch enqueues its look-ups on commit
        total += len(batch)
        if len(batch) < size:
            break
    return total


@shared_task(soft_time_limit=240, time_limit=300)
def cleanup_expired() -> int:
    """Delete finished records past their TTL, in bounded batches."""
    return cleanup_expired_records()


@shared_task(soft_time_limit=50, time_limit=60)
def seal_audit_chains() -> int:
    """Seal the audit events written since the last pass into their tenants' hash chains, in
    bounded batches (``audit_sealing.seal_audit_events``)."""
    report = audit_sealing.seal_audit_events()
    logger.info(
        "audit seal",
        extra={
            "sealed": report.sealed,
            "chains": report.chains,
            "busy": report.busy,
            "unfinished": report.unfinished,
        },
    )
    return report.sealed


@shared_task(soft_time_limit=50, time_limit=60)
def roll_up_metrics() -> int:
    """Fold new ledger activity into the metric buckets, then judge the thresholds (an
    automatic halt fails closed as soon as the numbers say so)."""
    read = metrics.roll_up()
    thresholds.evaluate()
    return read


@shared_task(soft_time_limit=50, time_limit=60)
def sweep_notifications() -> int:
    """Create the on-call notifications that are due and enqueue the ones to send (including
    retries whose back-off has passed, and any whose message a broker outage lost)."""
    due = notifications.sweep(batch_size=settings.LEDGER_NOTIFY_BATCH_SIZE)
    _send_each(deliver_notification, due, "notifications")
    return len(due)


def _send_each(task: Task, ids: list[int], what: str) -> None:
    """One message of ``task`` per id, until the broker fails. Nothing is lost then: what the
    ids name waits in PostgreSQL, and the next sweep finds it again."""
    for sent, pk in enumerate(ids):
        try:
            task.delay(pk)
        except Exception:
            logger.warning(
                "broker unavailable; %s left to the next sweep",
                what,
                extra={"left": len(ids) - sent},
            )
            return


@shared_task(
    bind=True, max_retries=settings.LEDGER_NOTIFY_MAX_ATTEMPTS, soft_time_limit=50, time_limit=60
)
def deliver_notification(self: Task, notification_id: int) -> str:
    """Send one notification; a failed send is retried with exponential back-off (the
    database's ``next_attempt_at`` decides, a message that arrives early is skipped)."""
    outcome = notifications.deliver(notification_id)
    if outcome == "retry":
        delay = notifications.retry_delay(self.request.retries + 1)
        raise self.retry(countdown=delay.total_seconds())
    return outcome


@shared_task(soft_time_limit=240, time_limit=300)
def run_compensations(compensation_ids: list[int]) -> list[str]:
    """Run approved compensations one after another (each at most once, whatever the number of
    messages: ``compensation_runs.run_compensation``); what came of each."""
    worker = services.worker_name()
    return [compensation_runs.run_compensation(pk, worker=worker) for pk in compensation_ids]


@shared_task(soft_time_limit=240, time_limit=300)
def compensate_run(run_pk: int) -> dict[str, object]:
    """Compensate a run as a whole, newest action first, stopping at the first failure."""
    return compensation_runs.run_saga(run_pk, worker=services.worker_name())


@shared_task(soft_time_limit=50, time_limit=60)
def apply_approved_writes() -> list[str]:
    """Apply the approved writes no runtime will retry (``approved_writes``): on the
    "reconcile" queue, whose workers read the workspaces as the file checks do."""
    worker = services.worker_name()
    return [approved_writes.apply_approved_write(pk, worker=worker) for pk in approved_writes.due()]


@shared_task(soft_time_limit=50, time_limit=60)
def snapshot_write_conflicts() -> list[str]:
    """Keep a snapshot of the file of each write conflict escalated without one
    (``write_conflicts``): on the "reconcile" queue, whose workers read the workspaces."""
    worker = services.worker_name()
    return [write_conflicts.snapshot_conflict(pk, worker=worker) for pk in write_conflicts.due()]


@shared_task(soft_time_limit=50, time_limit=60)
def sweep_compensations() -> int:
    """Send again the sagas of approved compensations that no worker started: their message
    was lost (a broker outage when the approval committed, Redis restarted). Each goes as its
    run's saga, so that the run's steps keep their order (``unsent_sagas`` says which)."""
    runs = unsent_sagas(
        grace_seconds=settings.LEDGER_COMPENSATION_RESEND_SECONDS,
        limit=settings.LEDGER_COMPENSATION_SWEEP_BATCH,
    )
    _send_each(compensate_run, runs, "compensations")  # they stay approved until sent
    logger.info("compensation sweep", extra={"runs": len(runs)})
    return len(runs)


def send_compensations(compensation_ids: list[int]) -> None:
    """Put approved compensations on the broker now. A broker outage loses nothing: they stay
    approved in PostgreSQL, and ``sweep_compensations`` sends them once the grace period has
    passed."""
    try:
        run_compensations.delay(list(compensation_ids))
    except Exception:
        logger.warning("broker unavailable; compensations wait", extra={"ids": compensation_ids})


def send_saga(run_pk: int) -> None:
    """Put a run's saga on the broker now (see ``send_compensations`` for an outage)."""
    try:
        compensate_run.delay(run_pk)
    except Exception:
        logger.warning("broker unavailable; the saga waits", extra={"run": run_pk})


@shared_task(soft_time_limit=50, time_limit=60)
def evaluate_rollouts() -> dict[str, int]:
    """Judge the running step of every running rollout plan (bounded per run): advance,
    wait, or halt and roll back the candidate."""
    return rollouts.evaluate()


def send_lookups(record_ids: list[int]) -> None:
    """Put look-ups on the broker now, ``RECONCILE_TASK_RECORDS`` records to a message."""
    size = settings.RECONCILE_TASK_RECORDS
    for start in range(0, len(record_ids), size):
        try:
            reconcile_records.delay(record_ids[start : start + size])
        except Exception:
            # Nothing is lost: the record is unknown in PostgreSQL and the sweep enqueues it.
            logger.warning(
                "broker unavailable; reconcile left to the sweep",
                extra={"records": len(record_ids) - start},
            )
            return


def enqueue_reconciliation(record_ids: list[int]) -> None:
    """Enqueue look-ups once the current transaction commits (never for rolled-back work)."""
    if record_ids:
        transaction.on_commit(lambda: send_lookups(list(record_ids)))
