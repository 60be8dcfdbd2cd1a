"""The child's stdout and stderr pass through the wrapper unchanged; a bounded tail is kept."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from slurm_triage.evidence import LogHit, parse_record
from slurm_triage.wrapper.output import TailBuffer
from tests.unit.test_wrap import WRAP, wrap_env

# Random chunks to both streams in random order, some by os.write and some through Python's
# buffered streams, ending in a partial line on each; the child reports what it wrote.
LOAD_CHILD = r"""
import hashlib, os, random, sys
rng = random.Random(5)
want = int(sys.argv[1])
digests = {1: hashlib.sha256(), 2: hashlib.sha256()}
sizes = {1: 0, 2: 0}
sizes_choice = [1, 2, 80, 81, 4095, 4096, 4097, 65536, 65537, 300000]
def put(fd, data):
    digests[fd].update(data); sizes[fd] += len(data)
    if rng.random() < 0.5:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    else:
        stream = sys.stdout if fd == 1 else sys.stderr
        stream.flush()
        stream.buffer.write(data)
        stream.buffer.flush()
while sizes[1] + sizes[2] < want:
    data = rng.randbytes(rng.choice(sizes_choice))
    if rng.random() < 0.5:
        data = data.replace(b"\n", b"") + b"\n"
    put(rng.choice((1, 2)), data)
put(1, b"partial last line on stdout, no newline")
put(2, b"partial last line on stderr, no newline")
with open(sys.argv[2], "w") as fh:
    fh.write("%s %d %s %d" % (digests[1].hexdigest(), sizes[1], digests[2].hexdigest(), sizes[2]))
"""


@given(
    cap=st.integers(min_value=1, max_value=64),
    chunks=st.lists(st.binary(max_size=200), max_size=40),
)
def test_tail_buffer_keeps_exactly_the_last_bytes(cap: int, chunks: list[bytes]) -> None:
    """The snapshot is the stream's last `cap` bytes; no more than `cap` plus one chunk is
    ever held."""
    tail = TailBuffer(cap)
    biggest = 0
    for chunk in chunks:
        tail.append(chunk)
        biggest = max(biggest, len(chunk))
        assert tail.held <= cap + biggest
    stream = b"".join(chunks)
    assert tail.snapshot() == stream[-cap:]
    assert tail.total == len(stream)
    assert tail.whole == (len(stream) <= cap)


def test_output_under_load_is_byte_identical(tmp_path: Path) -> None:
    """24 MB of random bytes written as fast as possible to both streams arrive unchanged,
    in order within each stream, partial last lines included."""
    report = tmp_path / "digests"
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        result = subprocess.run(
            [*WRAP, "--", sys.executable, "-c", LOAD_CHILD, str(24 << 20), str(report)],
            stdout=out,
            stderr=err,
            env=wrap_env(tmp_path),
            timeout=120,
        )
    assert result.returncode == 0
    out_digest, out_size, err_digest, err_size = report.read_text().split()
    out_bytes, err_bytes = out_path.read_bytes(), err_path.read_bytes()
    assert (len(out_bytes), len(err_bytes)) == (int(out_size), int(err_size))
    assert hashlib.sha256(out_bytes).hexdigest() == out_digest
    assert hashlib.sha256(err_bytes).hexdigest() == err_digest


def test_broken_stdout_does_not_block_the_child(tmp_path: Path) -> None:
    """With our stdout's reader gone, the child still writes all it wants and exits as it
    would; its stderr still arrives."""
    script = (
        "import sys\n"
        "for _ in range(400): sys.stdout.write('x' * 9999 + '\\n')\n"
        "sys.stdout.flush(); sys.stderr.write('done\\n'); sys.exit(3)"
    )
    proc = subprocess.Popen(
        [*WRAP, "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=wrap_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # EPIPE for the wrapper's first write to fd 1
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 3
    assert err.startswith(b"done\n")


def test_tee_copies_each_stream_per_rank(tmp_path: Path) -> None:
    """--tee-dir appends each stream to <dir>/<job>/<node>.<step>.<task>.{out,err}."""
    tee = tmp_path / "tee"
    for _ in range(2):
        subprocess.run(
            [*WRAP, "--tee-dir", str(tee), "--", "sh", "-c", "printf 'o\\n'; printf 'e' >&2"],
            env=wrap_env(tmp_path, SLURM_PROCID="3"),
            capture_output=True,
            timeout=30,
        )
    assert (tee / "77" / "nodeA.0.3.out").read_bytes() == b"o\no\n"
    assert (tee / "77" / "nodeA.0.3.err").read_bytes() == b"ee"


def test_unwritable_tee_dir_is_one_line_and_output_still_passes(tmp_path: Path) -> None:
    """A tee directory that cannot be made costs one line on stderr, nothing else."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [*WRAP, "--tee-dir", str(blocker / "sub"), "--", "sh", "-c", "echo hi"],
        env=wrap_env(tmp_path),
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0 and result.stdout == b"hi\n"
    assert result.stderr.count(b"\n") == 1 and b"cannot tee output" in result.stderr


def test_record_scans_only_the_bounded_tail(tmp_path: Path) -> None:
    """An OOM line within the last --tail-bytes is found; one followed by more than that is not."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    for job, lines_after in (("1", 10), ("2", 3000)):
        script = (
            f"import sys; print({oom!r}, file=sys.stderr)\n"
            f"for i in range({lines_after}): print('step', i, 'x' * 60, file=sys.stderr)\n"
            "sys.exit(1)"
        )
        subprocess.run(
            [*WRAP, "--tail-bytes", "65536", "--", sys.executable, "-c", script],
            env=wrap_env(tmp_path, SLURM_JOB_ID=job),
            capture_output=True,
            timeout=30,
        )
        record = parse_record((tmp_path / "evidence" / job / "nodeA.0.json").read_bytes())
        hits = {f.signature for f in record.facts if isinstance(f, LogHit)}
        assert ("torch.cuda_oom" in hits) == (job == "1"), json.dumps(sorted(hits))
