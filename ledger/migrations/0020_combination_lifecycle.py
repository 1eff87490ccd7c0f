"""Combinations get an honest lifecycle: a new one is ``new`` (not ``retired``), a halted one
knows what it halted from (so a resume restores it), and one in shadow where it came from.

Existing rows are mapped from their history: a retired combination that never ran (never
activated, never a canary with a share, no live run) is ``new``; a halted one resumes to the
state its last lifecycle event before the halt gave it; one in shadow returns to the state it
was put in shadow from.
"""

from django.db import migrations, models
from django.db.models import Q

# Audit actions that set a combination's state, with the state in ``after``.
STATE_EVENTS = (
    "combination.activated",
    "combination.canary",
    "combination.shadow",
    "combination.retired",
)


def _events(apps, combination):
    AuditEvent = apps.get_model("ledger", "AuditEvent")
    return AuditEvent.objects.filter(
        tenant_id=combination.tenant_id,
        target_type="versioncombination",
        target_id=str(combination.pk),
    )


def _ran(apps, combination) -> bool:
    """Whether live runs ever went to it: activated, a canary with a share, or a live run."""
    if combination.activated_at is not None:
        return True
    Run = apps.get_model("ledger", "Run")
    if Run.objects.filter(combination_id=combination.pk, shadow_of__isnull=True).exists():
        return True
    return (
        _events(apps, combination)
        .filter(
            Q(action="combination.activated")
            | Q(action="combination.canary", after__canary_share_bp__gt=0)
        )
        .exists()
    )


def _resting(apps, combination, state: str) -> str:
    """A state outside shadow for ``state`` as the old lifecycle wrote it (retired for new)."""
    if state == "canary":
        return "canary"
    return "retired" if _ran(apps, combination) else "new"


def _shadowed_from(apps, combination) -> tuple[str, int]:
    put = (
        _events(apps, combination)
        .filter(action="combination.shadow")
        .exclude(before__state="shadow")
        .order_by("-pk")
        .first()
    )
    before = (put.before or {}) if put is not None else {}
    state = _resting(apps, combination, str(before.get("state", "")))
    return state, int(before.get("canary_share_bp") or 0) if state == "canary" else 0


def _halted_from(apps, combination) -> tuple[str, int]:
    halt = _events(apps, combination).filter(action="combination.halted").order_by("-pk").first()
    last = _events(apps, combination).filter(action__in=STATE_EVENTS)
    if halt is not None:
        last = last.filter(pk__lt=halt.pk)
    event = last.order_by("-pk").first()
    after = (event.after or {}) if event is not None else {}
    state = str(after.get("state", ""))
    if state in ("active", "shadow"):
        share = int(after.get("canary_share_bp") or 0) if state == "shadow" else 0
        return state, share
    state = _resting(apps, combination, state)
    return state, int(after.get("canary_share_bp") or 0) if state == "canary" else 0


def forwards(apps, schema_editor):
    Combination = apps.get_model("ledger", "VersionCombination")
    for combination in Combination.objects.filter(state__in=["retired", "shadow", "halted"]):
        changes = {}
        if combination.state == "retired" and not _ran(apps, combination):
            changes["state"] = "new"
        if combination.state == "halted":
            changes["halted_from"], changes["halted_from_share_bp"] = _halted_from(
                apps, combination
            )
        if combination.state == "shadow" or changes.get("halted_from") == "shadow":
            changes["shadowed_from"], changes["shadowed_from_share_bp"] = _shadowed_from(
                apps, combination
            )
        if changes:
            Combination.objects.filter(pk=combination.pk).update(**changes)


def backwards(apps, schema_editor):
    Combination = apps.get_model("ledger", "VersionCombination")
    Combination.objects.filter(state="new").update(state="retired")


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0019_record_data_classification"),
    ]

    operations = [
        migrations.AddField(
            model_name="versioncombination",
            name="halted_from",
            field=models.CharField(
                blank=True,
                choices=[
                    ("new", "New"),
                    ("active", "Active"),
                    ("canary", "Canary"),
                    ("shadow", "Shadow"),
                    ("halted", "Halted"),
                    ("retired", "Retired"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="versioncombination",
            name="halted_from_share_bp",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="versioncombination",
            name="shadowed_from",
            field=models.CharField(
                blank=True,
                choices=[
                    ("new", "New"),
                    ("active", "Active"),
                    ("canary", "Canary"),
                    ("shadow", "Shadow"),
                    ("halted", "Halted"),
                    ("retired", "Retired"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="versioncombination",
            name="shadowed_from_share_bp",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name="versioncombination",
            name="state",
            field=models.CharField(
                choices=[
                    ("new", "New"),
                    ("active", "Active"),
                    ("canary", "Canary"),
                    ("shadow", "Shadow"),
                    ("halted", "Halted"),
                    ("retired", "Retired"),
                ],
                default="new",
                max_length=16,
            ),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.AddConstraint(
            model_name="versioncombination",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("state", "halted"),
                        models.Q(("halted_from__in", ["", "halted"]), _negated=True),
                    ),
                    models.Q(
                        models.Q(("state", "halted"), _negated=True),
                        ("halted_from", ""),
                        ("halted_from_share_bp", 0),
                    ),
                    _connector="OR",
                ),
                name="combination_halted_from_iff_halted",
            ),
        ),
        migrations.AddConstraint(
            model_name="versioncombination",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("state", "shadow"), ("shadowed_from__in", ["new", "retired", "canary"])
                    ),
                    models.Q(
                        ("halted_from", "shadow"),
                        ("state", "halted"),
                        ("shadowed_from__in", ["new", "retired", "canary"]),
                    ),
                    models.Q(
                        models.Q(("state", "shadow"), _negated=True),
                        models.Q(("halted_from", "shadow"), ("state", "halted"), _negated=True),
                        ("shadowed_from", ""),
                        ("shadowed_from_share_bp", 0),
                    ),
                    _connector="OR",
                ),
                name="combination_shadowed_from_in_shadow",
            ),
        ),
    ]
