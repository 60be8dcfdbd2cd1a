"""Reading sacct text a job's user can shape: their own text refused whole, `|` where it is
not free text, states Slurm does not have, cut-off lines, header sniffing, `sacct -p`."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_triage.analytics import analysis, ingest, sacct_layout
from slurm_triage.analytics.ingest import IngestError

HEADER = "JobID|JobName|Partition|Account|State|ExitCode|Submit|Start|End|Elapsed|NNodes|AllocTRES|NodeList\n"  # noqa: E501
LEGIT = (
    "500|train|gpu|acct|COMPLETED|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|"
    "2025-03-02T00:00:00|1-00:00:00|64|billing=512,cpu=512,gres/gpu=512,node=64|gpu[001-064]\n"
)
FORGED = (
    "|gpu|acct|NODE_FAIL|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-02T00:00:00|"
    "1-00:00:00|512|billing=4096,cpu=4096,gres/gpu=4096,node=512|gpu[001-512]"
)
OWN = "JobIDRaw|State|Submit|End|ElapsedRaw|NNodes|AllocTRES|NodeList"


def _hostile_name() -> str:
    """A job name (slurmctld checks only its length) holding newlines and `|` placed so
    that every line of the broken record, its first and its last too, is a whole row."""
    forged = "".join(f"9{i:05d}|f{FORGED}\n" for i in range(20))
    return f"x{FORGED}\n{forged}999|y"


def _with_name(name: str) -> str:
    return (
        f"501|{name}|gpu|acct|COMPLETED|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|"
        "2025-03-01T00:01:00|00:01:00|1|billing=1,cpu=1,gres/gpu=1,node=1|gpu001\n"
    )


def test_a_job_name_can_make_every_line_whole_so_such_a_file_is_refused() -> None:
    """No line of the hostile record is short or long, so no rule on the lines could tell
    it apart; a layout with JobName is refused, naming the sacct that re-exports it."""
    text = HEADER + LEGIT + _with_name(_hostile_name())
    columns = len(HEADER.split("|"))
    assert {line.count("|") + 1 for line in text.splitlines()} == {columns}
    with pytest.raises(IngestError) as refused:
        ingest.read_sacct_text(text)
    message = str(refused.value)
    assert "\n" not in message and "JobName holds job users' own text" in message
    assert (
        "sacct -P -o JobID,Partition,Account,State,ExitCode,Submit,Start,End,Elapsed,NNodes,"
        "AllocTRES,NodeList" in message
    )


@pytest.mark.parametrize(
    "column", ["Constraints", "Container", "StdOut", "StdErr", "StdIn", "WorkDir", "Comment"]
)
def test_every_user_text_column_is_refused_in_a_header_or_a_column_list(column: str) -> None:
    """`|` is Slurm's own OR in Constraints (`-C 'a|b'`), and the paths and comments are
    the user's: each of them, last or not, with a header or given by --sacct-columns."""
    body = "1|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n1|h100|a100\n"
    with pytest.raises(IngestError, match=f"{column} holds job users' own text"):
        ingest.read_sacct_text(f"{OWN}|{column}\n{body}")
    with pytest.raises(IngestError, match=f"{column} holds job users' own text"):
        ingest.read_sacct_text(body, columns=f"{OWN.replace('|', ',')},{column.lower()}")


def test_our_own_order_is_still_read() -> None:
    """What `report --since` asks sacct for holds no user text: it reads as before."""
    assert not set(sacct_layout.SACCT_FIELDS) & sacct_layout.USER_TEXT_FIELDS
    row = (
        "7|7|COMPLETED|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|"
        "gres/gpu=8|n1|p|u|note|with|bars\n"
    )
    accounting = ingest.read_sacct_text(row)
    assert (accounting.attempts.height, accounting.bad_lines) == (1, 0)


def test_a_word_that_is_no_sacct_field_is_refused_in_a_column_list() -> None:
    with pytest.raises(IngestError, match="'jobnmae', which is no sacct field"):
        ingest.read_sacct_text("1|x\n", columns=f"{OWN.replace('|', ',')},jobnmae")


def test_a_state_slurm_does_not_have_is_an_unparsable_row() -> None:
    """A shifted or garbled State is not an ended OTHER row: it is counted as unparsable."""
    text = (
        f"{OWN}\n"
        "1|h100|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n1\n"
        "2|BOOT_FAIL|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n1\n"
    )
    accounting = ingest.read_sacct_text(text)
    assert accounting.attempts["job_raw"].to_list() == [2]
    assert accounting.attempts["state"].cast(str).to_list() == ["OTHER"]
    assert accounting.bad_lines == 1


def test_a_cut_off_last_line_is_unparsable() -> None:
    """sacct ends every line with a newline: a last line without one was cut, and its
    last field may be a prefix (here NNodes 3 of 32, the NodeList gone)."""
    whole = f"{OWN}\n1|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n1\n"
    cut = whole + "2|NODE_FAIL|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|3"
    accounting = ingest.read_sacct_text(cut)
    assert accounting.attempts["job_raw"].to_list() == [1]
    assert accounting.bad_lines == 1
    assert ingest.read_sacct_text(cut + "2|gres/gpu=256|n[1-32]\n").bad_lines == 0


def test_a_cut_off_file_on_disk_is_read_the_same(tmp_path: Path) -> None:
    path = tmp_path / "cut.txt"
    path.write_text(
        f"{OWN}\n1|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n1\n"
        "2|FAILED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|32|gres/gpu=256|gpu[033-0"
    )
    accounting = ingest.read_sacct_file(path)
    assert (accounting.attempts.height, accounting.bad_lines) == (1, 1)


def test_a_node_list_that_is_no_hostlist_is_unparsable() -> None:
    """A failed row's NodeList is what node events are joined on: garbled, the row is."""
    text = (
        f"{OWN}\n"
        "1|FAILED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|32|gres/gpu=256|gpu[033-0\n"
        "2|FAILED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|32|gres/gpu=256|gpu[1-4,7],c9\n"
        "3|FAILED|2025-03-01T00:00:00|2025-03-01T01:00:00|0|1||None assigned\n"
    )
    accounting = ingest.read_sacct_text(text)
    assert accounting.attempts["job_raw"].to_list() == [2, 3]
    assert accounting.bad_lines == 1


def test_a_headerless_file_whose_first_row_holds_a_field_name() -> None:
    """A first line is a header only when every field is a sacct field name: an account
    (or partition) that happens to be called State does not make a row a header."""
    body = (
        "400|State|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|g1\n"
        "401|JobID|NODE_FAIL|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|64|gres/gpu=512|g1\n"
    )
    columns = "JobIDRaw,Account,State,Submit,End,ElapsedRaw,NNodes,AllocTRES,NodeList"
    accounting = ingest.read_sacct_text(body, columns=columns)
    assert accounting.attempts["job_raw"].to_list() == [400, 401]
    assert accounting.layout is not None and not accounting.layout.has_header


def test_sacct_p_output_with_its_ending_is_read_like_sacct_P() -> None:
    """`sacct -p` ends each line, its header's too, with one `|` more: one empty piece
    after the last column is accepted, with --sacct-columns or a header alike."""
    rows = (
        "101|gpu|NODE_FAIL|2025-03-01T00:00:00|2025-03-02T00:00:00|1-00:00:00|32|"
        "billing=256,gres/gpu=256,node=32|gpu[001-032]|\n"
        "102|gpu|COMPLETED|2025-03-01T00:00:00|2025-03-02T00:00:00|1-00:00:00|32|"
        "billing=256,gres/gpu=256,node=32|gpu[001-032]|\n"
    )
    cols = "JobID,Partition,State,Submit,End,Elapsed,NNodes,AllocTRES,NodeList"
    for accounting in (
        ingest.read_sacct_text(rows, columns=cols),
        ingest.read_sacct_text(cols.replace(",", "|") + "|\n" + rows),
    ):
        assert accounting.bad_lines == 0
        assert accounting.attempts["gpus"].to_list() == [256, 256]
        assert accounting.attempts["state"].cast(str).to_list() == ["NODE_FAIL", "COMPLETED"]
    shifted = ingest.read_sacct_text(rows.replace("|gpu|NODE", "|g|pu|NODE"), columns=cols)
    assert (shifted.attempts["job_raw"].to_list(), shifted.bad_lines) == ([102], 1)


def test_sacct_p_ending_after_admin_comment_in_the_middle_is_read() -> None:
    """With AdminComment before other columns, its `|` pieces are glued back and the
    columns after it keep their place: the ending is not taken for one of them."""
    rows = (
        '7|a|b {"triage":{"cause":"gpu_memory","n":1}}|FAILED|2025-03-01T00:00:00|'
        "2025-03-01T01:00:00|3600|32|gres/gpu=256|n[1-32]|\n"
        "8||COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|3600|1|gres/gpu=8|n40|\n"
    )
    columns = "JobIDRaw,AdminComment,State,Submit,End,ElapsedRaw,NNodes,AllocTRES,NodeList"
    for accounting in (
        ingest.read_sacct_text(rows, columns=columns),
        ingest.read_sacct_text(columns.replace(",", "|") + "|\n" + rows),
    ):
        assert accounting.bad_lines == 0
        assert accounting.attempts["gpus"].to_list() == [256, 8]
        assert accounting.attempts["nodelist"].to_list() == ["n[1-32]", None]
        assert accounting.attempts["comment_cause"].to_list() == ["gpu_memory", None]
        result = analysis.analyse(accounting, analysis.ReportOptions(simulate_runs=0))
        assert result.rf.events == 1
