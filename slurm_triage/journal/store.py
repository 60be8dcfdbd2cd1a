"""The outcome journal: every decision and its evidence in SQLite (WAL, one writer at a time).

Safe under concurrent epilogs: each connection waits for the write lock up to a bounded
busy timeout, and `claim()` makes the decision idempotent: the key (job id, restart count)
is inserted once, so two racing deciders agree on exactly one owner. A job id Slurm gives
out again is another job: its rows are a new generation of the id (`claim`). Schema changes are
numbered migrations applied in order inside a transaction (`PRAGMA user_version`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from slurm_triage.errors import TriageError
from slurm_triage.journal.records import DecisionRow, DecisionTotal, LifecycleEvent, NodeEvent

MIGRATIONS: tuple[str, ...] = (
    # 1: decisions, one row per job end; node events for per-node (lemon) history.
    """
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL,
        restart INTEGER NOT NULL,
        claimed_at REAL NOT NULL,
        decided_at REAL,
        owner TEXT NOT NULL,
        state TEXT, exit_code INTEGER, exit_signal INTEGER,
        user TEXT, partition TEXT, num_nodes INTEGER, nodes TEXT,
        cause TEXT, domain TEXT, confidence REAL, root_backed INTEGER,
        blamed TEXT, action TEXT, excluded TEXT, drained TEXT, begin_delay_s REAL,
        reasons TEXT, applied INTEGER, outcome TEXT, evidence TEXT,
        UNIQUE (job_id, restart)
    );
    CREATE INDEX decisions_job ON decisions (job_id);
    CREATE TABLE node_events (
        id INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        cause TEXT,
        xid INTEGER,
        multi_node INTEGER
    );
    CREATE INDEX node_events_node ON node_events (node, at);
    """,
    # 2: what the metrics need (observe/controller.py): the run's span and GPUs, when we
    # requeued it, which requeue budget a hold spent; each notification's outcome.
    """
    ALTER TABLE decisions ADD COLUMN ended_at REAL;
    ALTER TABLE decisions ADD COLUMN run_started_at REAL;
    ALTER TABLE decisions ADD COLUMN gpus INTEGER;
    ALTER TABLE decisions ADD COLUMN requeued_at REAL;
    ALTER TABLE decisions ADD COLUMN budget_spent TEXT;
    CREATE TABLE notifications (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        outcome TEXT NOT NULL
    );
    """,
    # 3: the node lifecycle (issue 16, policies.lifecycle): every step reconcile or a person
    # took, with its reason, repair cycle and burn-in job; repair history is read from it.
    """
    CREATE TABLE lifecycle (
        id INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        at REAL NOT NULL,
        state TEXT NOT NULL,
        action TEXT NOT NULL,
        applied INTEGER NOT NULL,
        reason TEXT NOT NULL,
        subject TEXT NOT NULL DEFAULT '',
        cycle INTEGER NOT NULL DEFAULT 0,
        job_id INTEGER,
        actor TEXT NOT NULL,
        detail TEXT
    );
    CREATE INDEX lifecycle_node ON lifecycle (node, at);
    """,
    # 4: a job id Slurm gives out again (MaxJobId wrapped, or slurmctld lost its state) is
    # another job: its rows start a new generation (claim), keyed apart from the old job's.
    """
    CREATE TABLE decisions_4 (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        restart INTEGER NOT NULL,
        claimed_at REAL NOT NULL,
        decided_at REAL,
        owner TEXT NOT NULL,
        state TEXT, exit_code INTEGER, exit_signal INTEGER,
        user TEXT, partition TEXT, num_nodes INTEGER, nodes TEXT,
        cause TEXT, domain TEXT, confidence REAL, root_backed INTEGER,
        blamed TEXT, action TEXT, excluded TEXT, drained TEXT, begin_delay_s REAL,
        reasons TEXT, applied INTEGER, outcome TEXT, evidence TEXT,
        ended_at REAL, run_started_at REAL, gpus INTEGER, requeued_at REAL, budget_spent TEXT,
        UNIQUE (job_id, generation, restart)
    );
    INSERT INTO decisions_4 (id, job_id, restart, claimed_at, decided_at, owner, state,
        exit_code, exit_signal, user, partition, num_nodes, nodes, cause, domain, confidence,
        root_backed, blamed, action, excluded, drained, begin_delay_s, reasons, applied,
        outcome, evidence, ended_at, run_started_at, gpus, requeued_at, budget_spent)
    SELECT id, job_id, restart, claimed_at, decided_at, owner, state, exit_code, exit_signal,
        user, partition, num_nodes, nodes, cause, domain, confidence, root_backed, blamed,
        action, excluded, drained, begin_delay_s, reasons, applied, outcome, evidence, ended_at,
        run_started_at, gpus, requeued_at, budget_spent
    FROM decisions;
    DROP TABLE decisions;
    ALTER TABLE decisions_4 RENAME TO decisions;
    CREATE INDEX decisions_job ON decisions (job_id, generation);
    """,
)
# The rows of a job id's newest generation (the job that holds the id now).
_CURRENT = "generation = (SELECT max(generation) FROM decisions AS d WHERE d.job_id = ?)"
NODE_EVENT_KINDS = ("blamed", "excluded", "drained")


class JournalError(TriageError):
    """The journal could not be opened, migrated or written; the message says which."""

    exit_code = 4


# O_PATH: a handle on the name that reads and locks nothing. Closing a real descriptor of
# the database or its -wal/-shm would drop every POSIX lock this process holds on it,
# SQLite's own under the open connection included (fcntl(2)), and let other writers
# corrupt the journal; an O_PATH descriptor's close drops none.
_OPEN_NAME = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _hand_over(dir_fd: int, name: str, uid: int, gid: int) -> None:
    """Give `name` in the directory at `dir_fd` to uid:gid when it is a regular file root
    owns with no other link (root's own, not a root file linked in by the directory's
    owner); a link, a FIFO, a missing name or another owner's file is left alone. The chown
    goes through the descriptor's /proc link, which names the file that was opened and
    checked, never what the name points to later."""
    try:
        fd = os.open(name, _OPEN_NAME, dir_fd=dir_fd)
    except OSError:  # missing: nothing to hand over
        return
    try:
        info = os.fstat(fd)  # a symlink opened O_PATH|O_NOFOLLOW is itself: S_ISLNK
        if stat.S_ISREG(info.st_mode) and info.st_uid == 0 and info.st_nlink == 1:
            with suppress(FileNotFoundError):  # no /proc: left to root, as before the fix
                os.chown(f"/proc/self/fd/{fd}", uid, gid)
    finally:
        os.close(fd)


def _json_list(text: str | None) -> tuple[str, ...]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


class Journal:
    """A handle on the journal file; cheap to open, one per process."""

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            self._migrate()
            self._keep_with_directory_owner()
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None
        except OSError as exc:
            raise JournalError(f"journal {self.path}: {exc.strerror or exc}") from None

    def _keep_with_directory_owner(self) -> None:
        """The decider writes the journal as SlurmUser; root (an admin's `slurm-triage
        history`, a test) may open it too. A journal, -wal or -shm file that root created
        would leave SlurmUser unable to write ("readonly database") and every later decision
        lost, so root hands what it created to the owner of the journal's directory.

        That owner can swap any name in the directory between our look and our chown (a
        link to a root file, a hard link to one, a FIFO), so each name is opened without
        following a link or waiting on a FIFO, and only the regular root-owned file with one
        link that was opened is handed over (fchown), never what a name points to later."""
        if os.geteuid() != 0:
            return
        dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            owner = os.fstat(dir_fd)
            if owner.st_uid == 0:
                return
            for suffix in ("", "-wal", "-shm"):
                _hand_over(dir_fd, f"{self.path.name}{suffix}", owner.st_uid, owner.st_gid)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path} busy or unwritable: {exc}") from None
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM
            # end the transaction): a ROLLBACK then fails with "no transaction is active",
            # which would hide the cause. The caller gets the original error.
            if self._db.in_transaction:
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise JournalError(
                f"journal {self.path} has schema {version}, newer than this "
                f"slurm-triage ({len(MIGRATIONS)})"
            )
        for number in range(version, len(MIGRATIONS)):
            with self._write() as db:
                # Re-check under the write lock: another process may have migrated.
                if db.execute("PRAGMA user_version").fetchone()[0] != number:
                    continue
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={number + 1}")

    @property
    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version")[0][0])

    def claim(
        self, job_id: int, restart: int, owner: str, run_started: float | None = None
    ) -> bool:
        """Take the decision for this job end; False if another decider already has it.

        A claim of this (job id, restart) made before `run_started` (when the run now ending
        started) cannot be this run's: its deciders all claim after it ended. It is another
        job's that held the id before (MaxJobId wrapped, or slurmctld lost its state), so
        this job starts a new generation of the id's rows and its history begins empty.
        Without `run_started` the old claim stands (the run cannot be told apart)."""
        try:
            with self._write() as db:
                row = db.execute(
                    "SELECT max(generation) FROM decisions WHERE job_id = ?", (job_id,)
                ).fetchone()
                generation = 0 if row[0] is None else int(row[0])
                taken = db.execute(
                    "SELECT claimed_at FROM decisions WHERE job_id = ? AND generation = ? "
                    "AND restart = ?",
                    (job_id, generation, restart),
                ).fetchone()
                if taken is not None:
                    if run_started is None or not taken[0] < run_started:
                        return False
                    generation += 1
                db.execute(
                    "INSERT INTO decisions (job_id, generation, restart, claimed_at, owner) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (job_id, generation, restart, time.time(), owner),
                )
                return True
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    def record(
        self,
        job_id: int,
        restart: int,
        fields: dict[str, Any],
        node_events: Sequence[NodeEvent] = (),
    ) -> None:
        """Fill in the claimed decision row and append its node events, atomically.
        `decided_at` is now unless the fields give it (the decision's own clock)."""
        columns = {
            k: (json.dumps(v) if isinstance(v, list | tuple | dict) else v)
            for k, v in fields.items()
        }
        columns.setdefault("decided_at", time.time())
        assignments = ", ".join(f"{k} = ?" for k in columns)
        try:
            with self._write() as db:
                db.execute(
                    f"UPDATE decisions SET {assignments} WHERE job_id = ? AND restart = ? "
                    f"AND {_CURRENT}",
                    (*columns.values(), job_id, restart, job_id),
                )
                db.executemany(
                    "INSERT INTO node_events (node, job_id, at, kind, cause, xid, multi_node) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (e.node, e.job_id, e.at, e.kind, e.cause, e.xid, int(e.multi_node))
                        for e in node_events
                    ],
                )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    def add_node_events(self, events: Sequence[NodeEvent]) -> None:
        try:
            with self._write() as db:
                db.executemany(
                    "INSERT INTO node_events (node, job_id, at, kind, cause, xid, multi_node) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (e.node, e.job_id, e.at, e.kind, e.cause, e.xid, int(e.multi_node))
                        for e in events
                    ],
                )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    def decisions(
        self, *, job_id: int | None = None, node: str | None = None, limit: int = 200
    ) -> tuple[DecisionRow, ...]:
        """Decided rows, newest first, for one job, or those that touched one node."""
        where: list[str] = ["decided_at IS NOT NULL"]
        args: list[Any] = []
        if job_id is not None:
            where.append(f"job_id = ? AND {_CURRENT}")
            args += [job_id, job_id]
        if node is not None:
            where.append(
                "(EXISTS (SELECT 1 FROM json_each(decisions.nodes) WHERE value = ?) "
                "OR EXISTS (SELECT 1 FROM json_each(decisions.blamed) WHERE value = ?))"
            )
            args += [node, node]
        rows = self._read(
            "SELECT job_id, restart, decided_at, state, cause, action, blamed, excluded, "
            "drained, reasons, applied, outcome, user, nodes, confidence, root_backed, evidence "
            f"FROM decisions WHERE {' AND '.join(where)} ORDER BY decided_at DESC, id DESC "
            "LIMIT ?",
            (*args, limit),
        )
        return tuple(_row(r) for r in rows)

    def node_events(self, since: float, node: str | None = None) -> tuple[NodeEvent, ...]:
        query = (
            "SELECT node, job_id, at, kind, cause, xid, multi_node FROM node_events "
            "WHERE at >= ?" + (" AND node = ?" if node else "") + " ORDER BY at"
        )
        args: tuple[Any, ...] = (since, node) if node else (since,)
        return tuple(
            NodeEvent(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))
            for r in self._read(query, args)
        )

    # Aggregates for the metrics (observe/controller.py): every decided job end counts.

    def decision_totals(self) -> tuple[DecisionTotal, ...]:
        """Per (cause, domain, action): decisions, and the GPU-seconds their runs held."""
        rows = self._read(
            "SELECT cause, domain, action, count(*), total(CASE WHEN run_started_at IS NOT NULL "
            "AND ended_at > run_started_at THEN (ended_at - run_started_at) * coalesce(gpus, 0) "
            "ELSE 0 END), max(decided_at) FROM decisions WHERE decided_at IS NOT NULL "
            "GROUP BY cause, domain, action"
        )
        return tuple(
            DecisionTotal(r[0] or "", r[1] or "", r[2] or "", r[3], r[4], r[5]) for r in rows
        )

    def requeue_latencies(self) -> tuple[float, ...]:
        """Seconds from each job end to our requeue of it (the job pending again)."""
        rows = self._read(
            "SELECT requeued_at - ended_at FROM decisions "
            "WHERE requeued_at IS NOT NULL AND ended_at IS NOT NULL"
        )
        return tuple(max(0.0, float(r[0])) for r in rows)

    def budget_holds(self) -> dict[str, int]:
        """Holds because a requeue budget was spent, by budget ("total" or a cause family)."""
        rows = self._read(
            "SELECT budget_spent, count(*) FROM decisions WHERE budget_spent IS NOT NULL "
            "AND decided_at IS NOT NULL GROUP BY budget_spent"
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def drain_totals(self) -> dict[str, int]:
        """Nodes the decisions drained, by the cause of the job end."""
        rows = self._read(
            "SELECT coalesce(cause, ''), count(*) FROM node_events "
            "WHERE kind = 'drained' GROUP BY 1"
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def notification_totals(self) -> dict[tuple[str, str], int]:
        """Notifications by (kind, outcome)."""
        rows = self._read("SELECT kind, outcome, count(*) FROM notifications GROUP BY 1, 2")
        return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}

    def add_notifications(self, outcomes: Sequence[tuple[float, str, str]]) -> None:
        """Record (time, kind, outcome) of notifications a decision sent or gave up on."""
        try:
            with self._write() as db:
                db.executemany(
                    "INSERT INTO notifications (at, kind, outcome) VALUES (?, ?, ?)", outcomes
                )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    # The node lifecycle (policies.lifecycle; `slurm-triage nodes`).

    def add_lifecycle_events(self, events: Sequence[LifecycleEvent]) -> None:
        """Append lifecycle steps, atomically."""
        try:
            with self._write() as db:
                db.executemany(
                    "INSERT INTO lifecycle (node, at, state, action, applied, reason, subject, "
                    "cycle, job_id, actor, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            e.node,
                            e.at,
                            e.state,
                            e.action,
                            int(e.applied),
                            e.reason,
                            e.subject,
                            e.cycle,
                            e.job_id,
                            e.actor,
                            json.dumps(dict(e.detail)) if e.detail else None,
                        )
                        for e in events
                    ],
                )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    def lifecycle_events(
        self, *, node: str | None = None, since: float = 0.0
    ) -> tuple[LifecycleEvent, ...]:
        """Lifecycle steps since `since`, oldest first, of one node or of all."""
        where = "at >= ?" + (" AND node = ?" if node is not None else "")
        args: tuple[Any, ...] = (since, node) if node is not None else (since,)
        rows = self._read(
            "SELECT node, at, state, action, applied, reason, subject, cycle, job_id, actor, "
            f"detail FROM lifecycle WHERE {where} ORDER BY at, id",
            args,
        )
        return tuple(_lifecycle(r) for r in rows)

    def last_applied(self, actions: Collection[str], since: float = 0.0) -> dict[str, float]:
        """Each node's newest applied lifecycle step among `actions` (at or after `since`):
        when a node last came back, for the lemon history that starts again there."""
        if not actions:
            return {}
        marks = ", ".join("?" * len(actions))
        rows = self._read(
            f"SELECT node, max(at) FROM lifecycle WHERE applied = 1 AND action IN ({marks}) "
            "AND at >= ? GROUP BY node",
            (*sorted(actions), since),
        )
        return {r[0]: float(r[1]) for r in rows}

    def latest_lifecycle(self) -> dict[str, LifecycleEvent]:
        """Each node's newest lifecycle step (what `nodes` and the metrics show)."""
        rows = self._read(
            "SELECT node, at, state, action, applied, reason, subject, cycle, job_id, actor, "
            "detail FROM lifecycle WHERE id IN (SELECT max(id) FROM lifecycle GROUP BY node)"
        )
        return {r[0]: _lifecycle(r) for r in rows}

    def _read(self, query: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Every read goes through here: a corrupt file or a journal without its tables is
        a JournalError naming the file (exit 4), never a traceback."""
        try:
            return self._db.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None


def _lifecycle(r: Sequence[Any]) -> LifecycleEvent:
    try:
        detail = json.loads(r[10]) if r[10] else {}
    except ValueError:
        detail = {}
    return LifecycleEvent(
        node=r[0],
        at=r[1],
        state=r[2],
        action=r[3],
        applied=bool(r[4]),
        reason=r[5],
        subject=r[6],
        cycle=r[7],
        job_id=r[8],
        actor=r[9],
        detail=detail if isinstance(detail, dict) else {},
    )


def _row(r: Sequence[Any]) -> DecisionRow:
    try:
        evidence = json.loads(r[16]) if r[16] else None
    except ValueError:
        evidence = None
    return DecisionRow(
        job_id=r[0],
        restart=r[1],
        decided_at=r[2],
        state=r[3],
        cause=r[4],
        action=r[5],
        blamed=_json_list(r[6]),
        excluded=_json_list(r[7]),
        drained=_json_list(r[8]),
        reasons=_json_list(r[9]),
        applied=bool(r[10]),
        outcome=r[11],
        user=r[12],
        nodes=_json_list(r[13]),
        confidence=r[14],
        root_backed=bool(r[15]),
        evidence=evidence,
    )
