"""`ib.ports` with no ports named (issue 14, item 6): the InfiniBand ports that were up at
baseline, on a simulated H100 node that also has a RoCE storage port, an uncabled second
port, a BlueField-3 on Ethernet and an SR-IOV virtual function, as real sysfs shows them."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.health_checks import infiniband, registry
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.health_checks.runner import Run
from slurm_triage.simulate.estate import NodeEstate
from tests.unit.test_health_runner import sim_config

FABRIC = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]


@pytest.fixture
def node(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def ib_check(config: Config):  # type: ignore[no-untyped-def]
    (result,) = Run(config, registry.select(["ib.ports"], False), node="node2").execute().results
    return result


def port_dir(estate: NodeEstate, port: str) -> Path:
    dev, num = port.split(":")
    return estate.sysfs / "class/infiniband" / dev / "ports" / num


def set_port(estate: NodeEstate, port: str, state: str, phys: str) -> None:
    (port_dir(estate, port) / "state").write_text(state + "\n")
    (port_dir(estate, port) / "phys_state").write_text(phys + "\n")


def test_the_fake_node_has_the_ports_of_a_real_one(node) -> None:  # type: ignore[no-untyped-def]
    """link_layer, state and phys_state of every kind of port, and which are VFs."""
    _, estate = node
    ports = {p.port: p for p in infiniband.read_ports(str(estate.sysfs), ())}
    assert {
        n: (p.link_layer, p.state, p.phys_state) for n, p in ports.items() if n not in FABRIC
    } == {
        "mlx5_4:1": ("Ethernet", "4: ACTIVE", "5: LinkUp"),  # RoCE storage
        "mlx5_5:1": ("InfiniBand", "1: DOWN", "2: Polling"),  # second port, no cable
        "mlx5_6:1": ("Ethernet", "4: ACTIVE", "5: LinkUp"),  # BlueField-3
        "mlx5_7:1": ("Ethernet", "1: DOWN", "3: Disabled"),  # BlueField-3, second port
        "mlx5_8:1": ("InfiniBand", "1: DOWN", "5: LinkUp"),  # VF of mlx5_0
    }
    assert [n for n, p in ports.items() if p.virtual_function] == ["mlx5_8:1"]
    assert ports["mlx5_0:1"].pci_bus_id == "0000:1a:00.0"


def test_a_healthy_h100_node_passes_without_naming_ports(node) -> None:  # type: ignore[no-untyped-def]
    """Only the fabric's InfiniBand ports are checked; the others are listed, not failed
    (every port under /sys/class/infiniband had to be ACTIVE: every such node drained)."""
    config, _ = node
    result = ib_check(config)
    assert result.status is CheckStatus.OK, result.reason
    assert result.evidence["ports"] == FABRIC
    assert result.evidence["not_checked"] == [
        "mlx5_4:1 Ethernet 4: ACTIVE/5: LinkUp",
        "mlx5_5:1 InfiniBand 1: DOWN/2: Polling",
        "mlx5_6:1 Ethernet 4: ACTIVE/5: LinkUp",
        "mlx5_7:1 Ethernet 1: DOWN/3: Disabled",
        "mlx5_8:1 VF 1: DOWN/5: LinkUp",
    ]


def test_a_port_up_at_baseline_that_goes_down_fails(node) -> None:  # type: ignore[no-untyped-def]
    """A port disabled without a link_downed tick is still known from the baseline."""
    config, estate = node
    assert ib_check(config).status is CheckStatus.OK
    set_port(estate, "mlx5_3:1", "1: DOWN", "3: Disabled")
    result = ib_check(config)
    assert result.failed and result.reason == "mlx5_3:1 1: DOWN / 3: Disabled"


def test_a_port_that_lost_its_link_since_boot_fails_on_the_first_run(node) -> None:  # type: ignore[no-untyped-def]
    """No baseline yet, but link_downed > 0: the port trained since the driver loaded."""
    config, estate = node
    set_port(estate, "mlx5_1:1", "1: DOWN", "2: Polling")
    (port_dir(estate, "mlx5_1:1") / "counters/link_downed").write_text("1\n")
    assert ib_check(config).failed


def test_a_baseline_port_gone_from_sysfs_fails(node) -> None:  # type: ignore[no-untyped-def]
    """An HCA that vanished (fell off the bus, driver unbound) is missing, not forgotten."""
    config, estate = node
    ib_check(config)
    shutil.rmtree(estate.sysfs / "class/infiniband/mlx5_2")
    result = ib_check(config)
    assert result.failed and result.reason == "mlx5_2:1 missing"


def test_a_second_port_cabled_later_joins_the_baseline(node) -> None:  # type: ignore[no-untyped-def]
    """The uncabled port is not checked until it comes up; from then on it must stay up."""
    config, estate = node
    ib_check(config)
    set_port(estate, "mlx5_5:1", "4: ACTIVE", "5: LinkUp")
    (port_dir(estate, "mlx5_5:1") / "rate").write_text("400 Gb/sec (4X NDR)\n")
    assert ib_check(config).evidence["ports"] == [*FABRIC, "mlx5_5:1"]
    set_port(estate, "mlx5_5:1", "1: DOWN", "2: Polling")
    assert ib_check(config).failed


def test_roce_and_vf_ports_are_checked_when_named(node) -> None:  # type: ignore[no-untyped-def]
    """Named ports are checked whatever their link layer: a RoCE port down fails then."""
    config, estate = node
    named = replace(
        config, health=replace(config.health, ib_ports=("mlx5_4:1", "mlx5_8:1"), ib_rate_gbps=0)
    )
    result = ib_check(named)
    assert result.failed and result.reason == "mlx5_8:1 1: DOWN / 5: LinkUp"
    set_port(estate, "mlx5_8:1", "4: ACTIVE", "5: LinkUp")
    assert ib_check(named).status is CheckStatus.OK
    set_port(estate, "mlx5_4:1", "1: DOWN", "3: Disabled")
    assert ib_check(named).reason == "mlx5_4:1 1: DOWN / 3: Disabled"


def test_a_node_without_infiniband_is_not_applicable(node) -> None:  # type: ignore[no-untyped-def]
    """A RoCE-only node: nothing to check unless named, and it says what it left alone."""
    config, estate = node
    for port in [*FABRIC, "mlx5_5:1", "mlx5_8:1"]:
        (port_dir(estate, port) / "link_layer").write_text("Ethernet\n")
    result = ib_check(config)
    assert result.status is CheckStatus.SKIPPED
    assert result.reason.startswith("no InfiniBand port configured or up at baseline (9 not")
