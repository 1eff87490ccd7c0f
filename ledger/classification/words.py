"""What the words of a tool's name and description say it does.

The name rule
-------------
A name is cut into words (``snake_case``, ``kebab-case``, ``dot.case``, ``camelCase``,
``ACRONYMWords``), each reduced to its plausible base forms (``creates``, ``created``,
``creating`` -> ``create``). Then:

1. A word that can write decides: a destructive verb (``delete``), an effect verb (``send``),
   an overwrite verb (``update``), or an **ambiguous** verb (``log``, ``resolve``, ``check``,
   ``load``, ``download``, ``sync``...: a read in one sense, a write in another) makes the name a
   write, whatever else it says. Write classes are checked before read ones, so
   ``get_and_delete`` is a delete.
2. A word that is a noun in read tools and a verb in write ones (``message``, ``comment``,
   ``commit``, ``build``...) is read as the object of an unambiguous read verb that comes
   before it in the same clause (``get_pull_request_comments``); anywhere else it is the verb,
   and writes (``git_commit``, ``get_and_lock``).
3. A name is a read only when its words that can act are all unambiguous reads (``get``,
   ``list``, ``search``...). A word the classifier does not know (a noun, or a verb it has not
   met) never lets the name be a read by itself: the name is a read only if the description
   establishes one too (see below). A name with no read verb at all (``directory_tree``) is a
   read only on the description's word. An unknown word that leads a second clause
   (``get_user_and_ban``) is that clause's verb: the name writes.

The description
---------------
From any server, a write action the description names anywhere (``sends``, ``email it``,
``overwrites``...) or a write verb leading one of its clauses makes the tool more
conservative; it never makes it less. A description *establishes a read* when the first verb
of its first sentence that the classifier knows is an unambiguous read ("Get a recursive tree
view...", "Performs a web search...") and it names no write action.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.domain import Idempotency
from ledger.stored_text import StoredText


def _words(text: str) -> frozenset[str]:
    """A vocabulary written as space-separated words."""
    return frozenset(text.split())


DESTRUCTIVE_VERBS = _words(
    """
    delete remove drop destroy purge truncate wipe erase kill terminate revoke uninstall
    unpublish rm del reset clear clean prune unlink rmdir shred evict overwrite
    """
)
EFFECT_VERBS = _words(
    """
    create send charge pay transfer refund publish merge post push deploy execute exec run
    invoke trigger add append insert submit buy purchase invite notify email forward
    fork follow start stop restart launch spawn provision allocate mint approve assign
    close reopen cancel archive move rename upload import install clone checkout rebase cherry
    migrate enqueue dispatch subscribe unsubscribe login logout grant withdraw deposit touch
    eval evaluate complete confirm acknowledge ack accept decline switch mkdir reboot shutdown
    ban mute pop dequeue consume receive
    """
)
OVERWRITE_VERBS = _words(
    """
    write update set put replace edit patch apply save modify upsert configure enable disable
    label toggle store change rewrite format rotate
    """
)
# Read verbs in one sense, write verbs in another: ``log`` reads a log or logs work,
# ``resolve`` resolves a name or an incident, ``download`` reads or writes a local file.
AMBIGUOUS_VERBS = _words(
    """
    log resolve check load poll ping download print sync process handle mark open watch
    compile generate refresh reload reserve convert scan sign register verify
    """
)
# Nouns in read tools, verbs in write tools: the object of a read verb before them in the same
# clause (``get_build_status``), the verb anywhere else (``build_image``, ``get_and_lock``).
OBJECT_OR_VERB = _words(
    """
    message comment commit order release star reaction reply review record report build test
    track tag schedule book flag pin hold claim lock export
    """
)
READ_VERBS = _words(
    """
    read get list search find fetch query show describe view lookup status diff count inspect
    browse info explain preview validate head lint summarize analyze compare render parse ls
    cat grep retrieve echo calculate compute geocode display
    """
)
# Description openings that say the tool answers with something; not read verbs in names
# (``return_order`` is a retail write).
DESCRIPTION_READS = READ_VERBS | _words("return provide give")
# ``show`` and ``display`` read a thing (``git_show``) but put these in front of a person.
_SHOWN = _words("show display")
_SHOWN_TO_PEOPLE = _words(
    "notification notifications alert alerts toast dialog popup banner prompt message messages"
)
# Write actions a description names anywhere, in forms that are verbs, not nouns: "emails it"
# and "sends", never "an email" or "the posts".
_NAMED_WRITES = re.compile(
    r"\b(?:send|sends|sending|emails?\s+(?:it|them|the|a)\b|emailing|posts?\s+(?:it|them|to)\b"
    r"|posting|charges?\s+(?:the|a|it)\b|charging|creates?|creating|deletes?|deleting|deleted"
    r"|removes?|removing|removed|overwrites?|overwriting|overwritten|updates?\s+(?:the|a|an|it)\b"
    r"|updating|notif(?:y|ies|ying)|publish(?:es|ing)?|pays?\s+(?:the|a|it)\b|paying|refunds?"
    r"|refunding|deploys?|deploying|writes?\s+(?:to|the|a|it)\b|writing|modif(?:y|ies|ying)"
    r"|inserts?|inserting|uploads?|uploading|executes?|executing|destroys?|destroying|drops?"
    r"\s+(?:the|a|it|table)\b|purges?|purging|erases?|erasing|transfers?\s+(?:the|a|money|funds)"
    r"\b|transferring|submits?|submitting|appends?|appending|renames?|renaming|moves?\s+"
    r"(?:the|a|it|files?)\b|invites?|inviting|cancels?|cancelling|canceling|merges?\s+(?:the|a|it)"
    r"\b|pushes|pushing|commits?\s+(?:the|it|changes)\b|books?\s+(?:a|the)\b|schedules?\s+"
    r"(?:a|the|it)\b|forwards?\s+(?:the|a|it)\b|reboot(?:s|ing)?|consum(?:e|es|ed|ing)|dequeu\w*|shut(?:s|ting)?\s+down"
    r"|(?:mail|share|tweet|page|alert|call|claim|ban|mute)s?\s+(?:it|them|the|a|an)\b)\b",
    re.IGNORECASE,
)
_DESTRUCTIVE_PHRASES = re.compile(
    r"\b(irreversibl[ey]|cannot be undone|permanently|destructive|delet\w*|remov\w*|overwrit\w*"
    r"|destroy\w*|purg\w*|eras\w*|drops?\s+(?:the|a|it|table))\b",
    re.IGNORECASE,
)
_CONJUNCTIONS = _words("and then or also")
_FILLER = _CONJUNCTIONS | _words("a an the of to by for in on from with at as all my any into")
_TOKEN_SPLIT = re.compile(
    r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])"
)
_SENTENCES = re.compile(r"[.!?\n;:]+")
_CLAUSE_BREAK = re.compile(r",|\b(?:and|then|or)\b", re.IGNORECASE)
# A clause's first word; conjunctions after a comma are skipped (", then save it").
_CLAUSE_LEADS = re.compile(
    r"(?:^|[,(]|\b(?:and|then|also|or)\b)\s*(?:(?:and|then|also|or)\s+)*([A-Za-z]+)",
    re.IGNORECASE,
)
# A clause that a conjunction opens: its first word and the next ("... and print it").
_JOINED_CLAUSE_LEADS = re.compile(
    r"\b(?:and|then|also)\s+(?:(?:and|then|also)\s+)*([A-Za-z]+)(?:\s+([A-Za-z]+))?", re.I
)
_OBJECTS = _words("it them the a an this that these those all every")
# Participles that describe a name's object (``list_allowed_directories``), not verbs.
_PARTICIPLES = _words(
    "allowed related linked nested selected detailed shared starred pinned staged unstaged "
    "annotated"
)


def tokens(text: str) -> list[str]:
    """The words of a name or a sentence, lower case."""
    return [t.lower() for t in _TOKEN_SPLIT.split(text) if t]


def stems(word: str) -> set[str]:
    """The word and its plausible base forms (creates, created, creating -> create)."""
    forms = {word}
    for suffix, replacement in (
        ("ies", "y"),
        ("es", ""),
        ("s", ""),
        ("ed", ""),
        ("ed", "e"),
        ("d", ""),
        ("ing", ""),
        ("ing", "e"),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            base = word[: -len(suffix)] + replacement
            forms.add(base)
            if len(base) > 2 and base[-1] == base[-2] and suffix in ("ed", "ing"):
                forms.add(base[:-1])  # logged, logging -> log
    return forms


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the words say: a class, the word that decided it and why, in a human's words."""

    idempotency: Idempotency
    destructive: bool
    word: str
    what: str
    rule: str


def _kind(word: str) -> str:
    forms = stems(word)
    for kind, verbs in (
        ("destructive", DESTRUCTIVE_VERBS),
        ("effect", EFFECT_VERBS),
        ("overwrite", OVERWRITE_VERBS),
        ("ambiguous", AMBIGUOUS_VERBS),
        ("object", OBJECT_OR_VERB),
        ("read", READ_VERBS),
    ):
        if forms & verbs:
            return kind
    if word in _FILLER or word in _PARTICIPLES:
        return "filler"
    return "unknown"


#: A reason that names what the name's write word does: ``what`` is one of ``_WRITE_KINDS``'s.
NAME_SAYS = StoredText(gettext_noop("The name says it %(what)s ('%(word)s')."), texts=("what",))
# What a write class does, in the reasons that name it (translated where they are shown).
_CREATES = StoredText(gettext_noop("creates a side effect"))()
_WRITE_KINDS = {
    "destructive": (
        Idempotency.NON_IDEMPOTENT,
        True,
        StoredText(gettext_noop("destroys something"))(),
    ),
    "effect": (Idempotency.NON_IDEMPOTENT, False, _CREATES),
    "ambiguous": (
        Idempotency.NON_IDEMPOTENT,
        False,
        StoredText(
            gettext_noop("may write: the word is a read in one sense and a write in another")
        )(),
    ),
    "object": (Idempotency.NON_IDEMPOTENT, False, _CREATES),
    "overwrite": (Idempotency.CONDITIONAL, False, StoredText(gettext_noop("overwrites state"))()),
    "unknown_verb": (
        Idempotency.NON_IDEMPOTENT,
        False,
        StoredText(gettext_noop("may write: a word not known to read leads a second clause"))(),
    ),
}
_ORDER = ("destructive", "effect", "object", "ambiguous", "unknown_verb", "overwrite")


@dataclass(frozen=True, slots=True)
class NameReading:
    """A name's words sorted by what they can do."""

    writes: dict[str, str]  # kind -> the first word of that kind
    reads: list[str]
    unknown: list[str]
    acting: tuple[str, ...] = ()  # every word that writes, in order


def read_name(name: str, *, namespace: str = "") -> NameReading:
    """Sort the name's words; a leading ``namespace`` (the server's prefix) is not a word."""
    writes: dict[str, str] = {}
    acting: list[str] = []
    reads: list[str] = []
    unknown: list[str] = []
    words = tokens(name)
    if namespace and words[:1] == [namespace]:
        words = words[1:]
    object_of_read = False
    after_conjunction = False
    for word in words:
        kind = _kind(word)
        if word in _CONJUNCTIONS:
            object_of_read = False  # "get_and_lock": a second verb, not an object
            after_conjunction = True
            continue
        if kind == "unknown" and after_conjunction:
            kind = "unknown_verb"  # "get_user_and_ban": the second clause's verb
        if kind != "filler":
            after_conjunction = False
        if kind == "object" and object_of_read:
            continue
        if kind in _WRITE_KINDS:
            writes.setdefault(kind, word)
            acting.append(word)
        elif kind == "read":
            reads.append(word)
            object_of_read = True
        elif kind == "unknown":
            unknown.append(word)
    shown = [word for word in reads if stems(word) & _SHOWN]
    if shown and set(words) & _SHOWN_TO_PEOPLE:
        writes.setdefault("ambiguous", shown[0])  # show_notification puts one on a screen
        acting.append(shown[0])
    return NameReading(writes, reads, unknown, tuple(acting))


def catalogue_namespace(names: Sequence[str]) -> str:
    """The first word every tool name of one server shares (``slack_``, ``maps_``), when it
    names no action: a prefix the server puts on all its tools says nothing about any one."""
    firsts = {(tokens(name) or [""])[0] for name in names}
    if len(firsts) != 1 or len(names) < 2:
        return ""
    (first,) = firsts
    return first if first and _kind(first) == "unknown" else ""


def name_write(reading: NameReading, *, ignore: Iterable[str] = ()) -> Verdict | None:
    """The most conservative write the name's words say, if any (``ignore``: words to skip)."""
    skipped = set(ignore)
    for kind in _ORDER:
        word = reading.writes.get(kind)
        if word is not None and not (stems(word) & skipped):
            idempotency, destructive, what = _WRITE_KINDS[kind]
            return Verdict(idempotency, destructive, word, what, f"mcp.name.{kind}")
    return None


def leading_words(description: str) -> list[str]:
    """The first word of each sentence and clause: tool descriptions lead with their verb."""
    words: list[str] = []
    for sentence in _SENTENCES.split(description):
        words.extend(match.group(1).lower() for match in _CLAUSE_LEADS.finditer(sentence))
    return words


#: The kinds of write a description can name, most conservative first.
_DESCRIBED_KINDS = ("destructive", "effect", "overwrite")


@dataclass(frozen=True, slots=True)
class DescribedWrite:
    """A write action a description names: its kind and the words that name it."""

    kind: str
    words: str

    @property
    def verb(self) -> str:
        return self.words.split()[0].lower()


def description_writes(description: str) -> list[DescribedWrite]:
    """Every write action the description names: a destructive phrase anywhere, a write verb
    leading a clause, a word joined on with "and"/"then" that acts on an object ("and message
    the team"), and a named write anywhere."""
    found = [
        DescribedWrite("destructive", match.group(0))
        for match in _DESTRUCTIVE_PHRASES.finditer(description)
    ]
    found += [
        DescribedWrite(_kind(word), word)
        for word in leading_words(description)
        if _kind(word) in _DESCRIBED_KINDS
    ]
    for match in _JOINED_CLAUSE_LEADS.finditer(description):
        word = match.group(1).lower()
        # a word that can write is the verb when an object follows ("and message the team",
        # "and print it") or nothing does, and a noun in a list otherwise ("and opening hours")
        follows = (match.group(2) or "it").lower()
        if _kind(word) in ("ambiguous", "object") and follows in _OBJECTS:
            found.append(DescribedWrite("effect", word))
    for named in _NAMED_WRITES.finditer(description):
        # "updates the" overwrites; every other named write is an effect
        overwrites = _kind(named.group(0).split()[0].lower()) == "overwrite"
        found.append(DescribedWrite("overwrite" if overwrites else "effect", named.group(0)))
    return found


def description_write(description: str) -> Verdict | None:
    """The most conservative write action the description names (``description_writes``)."""
    found = description_writes(description)
    for kind in _DESCRIBED_KINDS:
        first = next((write for write in found if write.kind == kind), None)
        if first is not None:
            idempotency, destructive, what = _WRITE_KINDS[kind]
            return Verdict(idempotency, destructive, first.words, what, f"mcp.description.{kind}")
    return None


def description_read(description: str) -> str | None:
    """The read verb that opens the description, when it establishes a read (and None if not).

    Only the opening counts: the first clause of the first sentence, its first three words
    ("Performs a web search ..."), so "Frobnicates the table and returns it" establishes
    nothing."""
    first = _CLAUSE_BREAK.split(_SENTENCES.split(description.strip(), maxsplit=1)[0])[0]
    words = [w for w in tokens(first) if w not in _FILLER and not w.endswith("ly")]
    for word in words[:3]:
        if stems(word) & DESCRIPTION_READS:
            return word
        if _kind(word) in _WRITE_KINDS:
            return None
    return None
