"""Re-classification of MCP tools entering the registry.

The tool's *name* and *description* give the baseline, by the rule documented in
``ledger.classification.words``: a name is a read only when every word that can act is an
unambiguous read, and a word the classifier does not know needs the description to establish
the read. The description's write actions only ever tighten. The ``ToolAnnotations`` are a
claim: from an **untrusted** server they may only make the result more conservative; from a
**trusted** server they are believed, except that they cannot clear a name that says the tool
writes (an ambiguous verb such as ``log`` is what a trusted ``readOnlyHint`` resolves). Per the
MCP spec, ``destructiveHint`` and ``openWorldHint`` default to true and ``readOnlyHint`` and
``idempotentHint`` to false.

A tool with an argument that carries code (SQL, a shell command, a script) is classified per
call from that argument, whatever the server or its annotations claim; what is stored for the
tool is the conservative fallback (``ledger.classification.calls`` does the per-call part).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext_noop

from ledger.classification import UNDECLARED, Classification, most_conservative
from ledger.classification.arguments import DecidingArgument, deciding_argument
from ledger.classification.mcp_servers import known_read
from ledger.classification.words import (
    AMBIGUOUS_VERBS,
    NAME_SAYS,
    NameReading,
    Verdict,
    description_read,
    description_write,
    name_write,
    read_name,
    stems,
)
from ledger.domain import Idempotency, PerCall, ServerTrust
from ledger.stored_text import StoredText

_MKDIR_WORDS = frozenset({"directory", "directories", "dir", "dirs", "folder", "folders"})
_MKDIR_SEMANTICS = re.compile(r"already exists|ensure[sd]? (?:that )?(?:a |the )?\w* ?exist", re.I)


_SAYS = {
    "name": NAME_SAYS,
    "description": StoredText(
        gettext_noop("The description says it %(what)s ('%(word)s')."), texts=("what",)
    ),
}
_ONLY_READS = StoredText(gettext_noop("The name only reads ('%(word)s')."))
_DESCRIPTION_READS = StoredText(gettext_noop("The description establishes a read ('%(opening)s')."))
_DESCRIPTION_READS_FOR = StoredText(
    gettext_noop(
        "The description establishes a read ('%(opening)s') for the name's other words "
        "(%(unknown)s)."
    )
)
_NOTHING_READS = StoredText(
    gettext_noop(
        "Nothing establishes a read: the name's words (%(unknown)s) are not known, "
        "and the description does not open with a read."
    )
)
_PER_CALL = StoredText(
    gettext_noop(
        "Classified per call from its %(kind)s argument '%(name)s', whatever is claimed about "
        "the tool; this is the fallback."
    )
)
_MKDIR_UNTRUSTED = StoredText(
    gettext_noop(
        "%(reason)s It claims mkdir -p semantics (creating an existing directory changes "
        "nothing); that is believed only from a trusted server."
    ),
    texts=("reason",),
)
_MKDIR_TRUSTED = StoredText(
    gettext_noop(
        "The trusted server declares mkdir -p semantics: creating a directory that exists "
        "changes nothing, so a repeat is harmless."
    )
)
_UNTRUSTED_WRITES = StoredText(gettext_noop("The server's annotations say the tool writes."))
_UNTRUSTED_DESTROYS = StoredText(
    gettext_noop("The server's annotations say the tool writes destructively.")
)
_READ_ONLY_NOT_BELIEVED = StoredText(
    gettext_noop("%(reason)s (readOnlyHint is not believed from an untrusted server.)"),
    texts=("reason",),
)
_DESTRUCTIVE_NAME = StoredText(
    gettext_noop("%(reason)s Annotations cannot clear a destructive name."), texts=("reason",)
)
_CONTRADICTED = StoredText(
    gettext_noop("%(reason)s A readOnlyHint that contradicts the name is not believed."),
    texts=("reason",),
)
_TRUSTED_READ_ONLY = StoredText(
    gettext_noop("The trusted server declares the tool read-only (readOnlyHint).")
)
_TRUSTED_IDEMPOTENT = StoredText(
    gettext_noop("The trusted server declares an idempotent, non-destructive write.")
)
_TRUSTED_WRITE = StoredText(
    gettext_noop("The trusted server declares a write that is not idempotent.")
)
_TRUSTED_DESTRUCTIVE = StoredText(
    gettext_noop(
        "The trusted server declares a write that is not idempotent and may be destructive."
    )
)


def _of(verdict: Verdict, origin: str) -> Classification:
    return Classification.of(
        verdict.idempotency,
        reason=_SAYS[origin](what=verdict.what, word=verdict.word),
        rule=verdict.rule,
        destructive=verdict.destructive,
    )


def _hint(annotations: Mapping[str, Any], name: str) -> bool | None:
    value = annotations.get(name)
    return value if isinstance(value, bool) else None


def validate_descriptor(descriptor: Any) -> tuple[str, str, Mapping[str, Any]]:
    """Check the parts of an MCP tool descriptor the classifier reads; raise ValueError if off."""
    if not isinstance(descriptor, Mapping):
        raise ValueError("each tool must be a JSON object")
    name = descriptor.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a tool needs a non-empty string 'name'")
    description = descriptor.get("description")
    description = "" if description is None else description
    if not isinstance(description, str):
        raise ValueError(f"tool {name!r}: 'description' must be a string")
    annotations = descriptor.get("annotations")
    annotations = {} if annotations is None else annotations
    if not isinstance(annotations, Mapping):
        raise ValueError(f"tool {name!r}: 'annotations' must be an object")
    return name, description, annotations


def classify_words(reading: NameReading, description: str) -> Classification:
    """The name and description rule (``ledger.classification.words``), before annotations."""
    written = name_write(reading)
    if written is not None:
        result = _of(written, "name")
    elif not reading.unknown and reading.reads:
        result = Classification.of(
            Idempotency.IDEMPOTENT,
            reason=_ONLY_READS(word=reading.reads[0]),
            rule="mcp.name.read",
        )
    elif (opening := description_read(description)) is not None:
        unknown = ", ".join(f"'{w}'" for w in reading.unknown)
        result = Classification.of(
            Idempotency.IDEMPOTENT,
            reason=(
                _DESCRIPTION_READS_FOR(opening=opening, unknown=unknown)
                if unknown
                else _DESCRIPTION_READS(opening=opening)
            ),
            rule="mcp.description.read",
        )
    else:
        unknown = ", ".join(f"'{w}'" for w in reading.unknown) or "none"
        result = Classification(
            UNDECLARED.idempotency,
            UNDECLARED.replay_policy,
            False,
            _NOTHING_READS(unknown=unknown),
            "mcp.name.unknown",
        )
    from_description = description_write(description)
    if from_description is not None:
        result = most_conservative(result, _of(from_description, "description"))
    return result


def classify_mcp_tool(
    descriptor: Mapping[str, Any],
    *,
    trust: ServerTrust,
    namespace: str = "",
    implementation: str = "",
) -> Classification:
    """Classify one tool of an MCP ``tools/list`` result from a server of the given trust;
    ``namespace`` is the prefix all that server's tools share (``catalogue_namespace``),
    ``implementation`` the name the server gave itself (``serverInfo.name``): a reference
    server's read the ledger knows (``mcp_servers``) is a read, unless its annotations say
    otherwise."""
    name, description, annotations = validate_descriptor(descriptor)
    known = known_read(implementation, descriptor)
    if known is not None:
        return _raise_only(known, annotations)
    reading = read_name(name, namespace=namespace)
    result = classify_words(reading, description)
    if trust is ServerTrust.TRUSTED:
        result = _believe_annotations(result, reading, annotations)
    else:
        result = _raise_only(result, annotations)
    result = _directory_creation(result, reading, description, annotations, trust)
    argument = deciding_argument(descriptor)
    if argument is not None and argument.kind is not PerCall.FILE_WRITE:
        return per_call_fallback(argument, result)
    return result


def per_call_fallback(argument: DecidingArgument, result: Classification) -> Classification:
    """What is stored for a code-carrying tool: ``never``, until a call's argument says more."""
    return Classification(
        Idempotency.NON_IDEMPOTENT,
        UNDECLARED.replay_policy,
        result.destructive,
        _PER_CALL(kind=argument.kind.value, name=argument.name),
        f"mcp.per_call.{argument.kind.value}",
    )


def _directory_creation(
    result: Classification,
    reading: NameReading,
    description: str,
    annotations: Mapping[str, Any],
    trust: ServerTrust,
) -> Classification:
    """``create_directory`` with ``mkdir -p`` semantics: creating what exists changes nothing.

    That the tool behaves so is the server's claim, so only a trusted server's is believed."""
    words = set(reading.unknown)
    only_creates = set(reading.writes) == {"effect"} and bool(
        stems(reading.writes["effect"]) & {"create", "mkdir"}
    )
    claims = _MKDIR_SEMANTICS.search(description) or _hint(annotations, "idempotentHint")
    if not (only_creates and words & _MKDIR_WORDS and claims and not result.destructive):
        return result
    if trust is not ServerTrust.TRUSTED:
        return Classification(
            result.idempotency,
            result.replay_policy,
            result.destructive,
            _MKDIR_UNTRUSTED(reason=result.reason),
            result.rule,
        )
    return Classification.of(
        Idempotency.IDEMPOTENT,
        reason=_MKDIR_TRUSTED(),
        rule="mcp.directory_creation.idempotent",
    )


def _raise_only(result: Classification, annotations: Mapping[str, Any]) -> Classification:
    """Untrusted annotations: each can only make ``result`` more conservative."""
    read_only = _hint(annotations, "readOnlyHint")
    destructive = _hint(annotations, "destructiveHint")
    idempotent = _hint(annotations, "idempotentHint")
    if read_only is False or destructive is True:
        says_destructive = destructive is not False  # spec default: true
        idempotency = (
            Idempotency.CONDITIONAL
            if idempotent is True and not says_destructive
            else Idempotency.NON_IDEMPOTENT
        )
        result = most_conservative(
            result,
            Classification.of(
                idempotency,
                reason=(_UNTRUSTED_DESTROYS if says_destructive else _UNTRUSTED_WRITES)(),
                rule="mcp.annotations.untrusted",
                destructive=says_destructive,
            ),
        )
    if read_only is True and result.idempotency is not Idempotency.IDEMPOTENT:
        result = Classification(
            result.idempotency,
            result.replay_policy,
            result.destructive,
            _READ_ONLY_NOT_BELIEVED(reason=result.reason),
            result.rule,
        )
    return result


def _believe_annotations(
    result: Classification, reading: NameReading, annotations: Mapping[str, Any]
) -> Classification:
    """Trusted claims: the annotations decide, unless the name says the tool writes."""
    read_only = _hint(annotations, "readOnlyHint")
    destructive = _hint(annotations, "destructiveHint")
    idempotent = _hint(annotations, "idempotentHint")
    if read_only is None and destructive is None and idempotent is None:
        return result
    # A trusted readOnlyHint settles what an ambiguous verb means (``git_log`` reads the log).
    written = name_write(reading, ignore=AMBIGUOUS_VERBS)
    if written is not None and written.destructive:
        return Classification(
            result.idempotency,
            result.replay_policy,
            True,
            _DESTRUCTIVE_NAME(reason=result.reason),
            result.rule,
        )
    if read_only is True:
        if written is not None:
            return Classification(
                result.idempotency,
                result.replay_policy,
                result.destructive,
                _CONTRADICTED(reason=result.reason),
                result.rule,
            )
        return Classification.of(
            Idempotency.IDEMPOTENT,
            reason=_TRUSTED_READ_ONLY(),
            rule="mcp.annotations.trusted.read_only",
        )
    says_destructive = destructive is not False
    if idempotent is True and not says_destructive:
        return Classification.of(
            Idempotency.CONDITIONAL,
            reason=_TRUSTED_IDEMPOTENT(),
            rule="mcp.annotations.trusted.idempotent_write",
        )
    return Classification.of(
        Idempotency.NON_IDEMPOTENT,
        reason=(_TRUSTED_DESTRUCTIVE if says_destructive else _TRUSTED_WRITE)(),
        rule="mcp.annotations.trusted.write",
        destructive=says_destructive,
    )
