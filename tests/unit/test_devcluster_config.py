"""The dev cluster's layout and config text per Slurm release (pure; no daemons started)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from slurm_triage.devcluster import cluster
from slurm_triage.devcluster import config_files as cf


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "SLURM_TRIAGE_DEVCLUSTER_DIR",
        "SLURM_TRIAGE_DEVCLUSTER_PORT",
        "SLURM_TRIAGE_DEVCLUSTER_SLURM",
        "SLURM_TRIAGE_DEVCLUSTER_BACKEND",
    ):
        monkeypatch.delenv(var, raising=False)


def test_default_release_is_debians_on_path() -> None:
    layout = cluster.default_layout()
    assert layout.slurm == "22.05"
    assert layout.root == cluster.DEFAULT_ROOT and layout.base_port == 16800
    assert layout.slurm_prefix is None and layout.slurm_path == ""
    assert "SlurmctldParameters" not in cf.slurm_conf(layout)


def test_a_second_release_gets_its_own_tree_ports_and_commands() -> None:
    old, new = cluster.default_layout("22.05"), cluster.default_layout("25.11")
    assert new.root == Path(f"{cluster.DEFAULT_ROOT}-25.11") != old.root
    ports = {old.ctld_port, old.dbd_port, old.mysql_port, *map(old.node_port, range(3))}
    assert not ports & {new.ctld_port, new.dbd_port, new.mysql_port, new.node_port(0)}
    assert cluster.client_env(new)["PATH"].startswith("/opt/slurm-25.11/bin:")
    hook = cf.hook_script(new, "slurm-triage-epilog")
    assert "export PATH=/opt/slurm-25.11/bin:/opt/slurm-25.11/sbin:" in hook
    assert "SlurmctldParameters=enable_expedited_requeue" in cf.slurm_conf(new)


def test_release_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_TRIAGE_DEVCLUSTER_SLURM", "25.11")
    assert cluster.default_layout().slurm == "25.11"


def test_unknown_release_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(cluster.DevClusterError, match=r"'24\.05' \(known: 22\.05, 25\.11\)"):
        cluster.default_layout("24.05")


def test_controller_and_accounting_run_as_an_unprivileged_slurm_user() -> None:
    layout = cluster.default_layout()
    assert f"SlurmUser={cf.SLURM_USER}\n" in cf.slurm_conf(layout)
    assert "SlurmdUser=root\n" in cf.slurm_conf(layout)
    assert f"SlurmUser={cf.SLURM_USER}\n" in cf.slurmdbd_conf(layout)
    assert cf.SLURM_USER != "root"


def test_pyslurm_backend_needs_a_release_with_a_pyslurm_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(cluster.DevClusterError, match="no pyslurm build for Slurm 22.05"):
        cluster.default_layout("22.05", "pyslurm")
    layout = cluster.default_layout("25.11", "pyslurm")
    assert layout.pyslurm_dir == Path("/opt/slurm-25.11/python")
    assert '[slurm]\nbackend = "pyslurm"\n' in cf.triage_conf(layout)
    monkeypatch.setenv("SLURM_TRIAGE_DEVCLUSTER_BACKEND", "cli")
    assert cluster.default_layout("25.11").backend == "cli"
    with pytest.raises(cluster.DevClusterError, match="unknown backend 'rest'"):
        cluster.default_layout("25.11", "rest")


def test_reboot_program_restarts_the_calling_nodes_slurmd_with_a_new_boot_time() -> None:
    layout = cluster.default_layout("25.11")
    assert f"RebootProgram={layout.hooks}/reboot" in cf.slurm_conf(layout)
    script = cf.reboot_script(layout)
    assert 'inject --node "$node" reboot' in script
    assert f'setsid {layout.hooks}/power-cycle "$pid" "$node"' in script
    assert "export PATH=/opt/slurm-25.11/bin:/opt/slurm-25.11/sbin:" in script
    power_cycle = cf.power_cycle_script(layout)
    # A clean environment: 25.11's reconfigure leaves SLURMD_RECONF and SLURMD_BOOT_TIME in
    # slurmd's (test_reboot runs that case on the dev cluster).
    assert (
        f'exec env -i PATH="$PATH" SLURM_CONF="$conf" slurmd {cf.SLURMD_BOOT_FLAG} -f "$conf" '
        '-N "$node"'
    ) in power_cycle


def _power_cycle(tmp_path: Path, *, hang: bool) -> tuple[subprocess.Popen[bytes], Path]:
    """Run the power-cycle hook against a stand-in slurmd (a sleeping process) with a fake
    `slurmd` on PATH that records how it was started; the environment is a reconfigured
    25.11 slurmd's."""
    layout = cf.ClusterLayout(root=tmp_path / "root", hostname="vm", base_port=1, bin_dir=tmp_path)
    (layout.simulate_root / "node3").mkdir(parents=True)
    if hang:
        (layout.simulate_root / "node3" / "boot-hang").write_text("")
    started = tmp_path / "started"
    fake = tmp_path / "bin" / "slurmd"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n{{ echo "$@"; env; }} > {started}\n')
    fake.chmod(0o755)
    hook = tmp_path / "power-cycle"
    hook.write_text(cf.power_cycle_script(layout))
    hook.chmod(0o755)
    old = subprocess.Popen(["sleep", "60"])
    reconfigured = {
        "PATH": f"{fake.parent}:/usr/bin:/bin",
        "SLURMD_RECONF": "1",
        "SLURMD_RECONF_LISTEN_FD": "10",
        "SLURMD_BOOT_TIME": "1700000000",
    }
    subprocess.run([str(hook), str(old.pid), "node3"], env=reconfigured, check=True, timeout=20)
    return old, started


def test_power_cycle_stops_slurmd_and_starts_it_with_a_clean_environment(tmp_path: Path) -> None:
    old, started = _power_cycle(tmp_path, hang=False)
    assert old.wait(timeout=5) == -signal.SIGTERM
    args, *environment = started.read_text().splitlines()
    assert args == f"{cf.SLURMD_BOOT_FLAG} -f {tmp_path}/root/etc/slurm.conf -N node3"
    assert not [v for v in environment if v.startswith("SLURMD_")]
    assert f"SLURM_CONF={tmp_path}/root/etc/slurm.conf" in environment


def test_power_cycle_of_a_node_with_boot_hang_leaves_slurmd_stopped(tmp_path: Path) -> None:
    old, started = _power_cycle(tmp_path, hang=True)
    assert old.wait(timeout=5) == -signal.SIGTERM
    assert not started.exists()


def test_a_controller_killed_before_its_first_save_left_a_state_it_cannot_start_from(
    tmp_path: Path,
) -> None:
    spool = tmp_path / "ctld"
    spool.mkdir()
    assert not cluster.controller_state_lost(spool)  # never started: a fresh start
    (spool / "clustername").write_text("triage-dev\n")
    (spool / "job_state").write_bytes(b"\0")
    assert cluster.controller_state_lost(spool)
    (spool / "assoc_usage").write_bytes(b"\0")
    assert not cluster.controller_state_lost(spool)  # saved: slurmctld recovers it
