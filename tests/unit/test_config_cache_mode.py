"""The config file's parsed copy holds the file's whole text, so no one may read it who may
not read the file: its mode is the file's, less any write bit for group or other.

The tests run as root, as /etc/slurm-triage/config.toml's owner on a node."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_triage.config_cache import CacheOutcome, cache_path, read_config_file, refresh_cache
from tests.as_user import run_as

NOBODY = 65534
TEXT = '[slurm]\ntimeout_s = 4.0\n\n[notify]\nwebhook_url = "https://hooks.example/T0/secret"\n'


@pytest.fixture
def config() -> Iterator[Path]:
    """A config file in a directory every user may search (outside pytest's own 0700 tree),
    so that a child that became another user reaches it."""
    directory = Path(tempfile.mkdtemp(prefix="slurm-triage-config-", dir="/tmp"))
    directory.chmod(0o755)
    path = directory / "config.toml"
    path.write_text(TEXT)
    try:
        yield path
    finally:
        shutil.rmtree(directory)


def _copy_mode(config: Path) -> int:
    return stat.S_IMODE(os.stat(cache_path(config)).st_mode)


@pytest.mark.parametrize(
    ("file_mode", "copy_mode"),
    [(0o600, 0o600), (0o644, 0o644), (0o640, 0o640), (0o400, 0o400), (0o664, 0o644)],
)
def test_the_copy_is_readable_by_no_more_than_the_file(
    config: Path, file_mode: int, copy_mode: int
) -> None:
    """A 0600 config (it may hold a webhook's secret) gets a 0600 copy, a 0644 one a 0644
    copy; a group write bit is never passed on. Its owner reads the copy back."""
    config.chmod(file_mode)
    assert refresh_cache(config).outcome == CacheOutcome.WRITTEN
    assert _copy_mode(config) == copy_mode
    assert refresh_cache(config).outcome == CacheOutcome.FRESH
    assert read_config_file(config) == tomllib.loads(TEXT)


def test_a_copy_wider_than_the_file_is_written_again_narrower(config: Path) -> None:
    """The file narrowed to 0600 after its copy was written 0644, its text unchanged: the
    copy is not used as it is but written again, 0600."""
    config.chmod(0o644)
    assert refresh_cache(config).outcome == CacheOutcome.WRITTEN
    config.chmod(0o600)
    assert refresh_cache(config).outcome == CacheOutcome.WRITTEN
    assert _copy_mode(config) == 0o600
    assert json.loads(Path(cache_path(config)).read_text())["source"] == TEXT


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_a_reader_who_cannot_read_the_copy_parses_the_file(config: Path) -> None:
    """The file widened to 0644 after a 0600 copy was written: a rank of another user
    cannot open the copy and parses the file instead, with the same settings and no error."""
    config.chmod(0o600)
    refresh_cache(config)
    config.chmod(0o644)
    said = run_as(NOBODY, lambda: json.dumps(read_config_file(config)))
    assert json.loads(said) == tomllib.loads(TEXT)
    assert _copy_mode(config) == 0o600  # the reader, not its owner, wrote nothing
