"""Rejected configurations: every kind of mistake names the file, the line, the field path and the reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from core.configuration import DevEnvironmentConfiguration
from core.configuration.loading import (
    ConfigIssue,
    ConfigurationError,
    load_configuration,
    load_configuration_text,
)


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigurationError) as caught:
        load_configuration_text(textwrap.dedent(text).lstrip("\n"), "bad.yml")
    lines = [str(issue) for issue in caught.value.issues]
    assert str(caught.value) == "\n".join(lines)
    assert all("\n" not in line for line in lines)
    return lines


def only_issue(text: str) -> str:
    found = issues(text)
    assert len(found) == 1, found
    return found[0]


# --- fields ------------------------------------------------------------------------------------------


def test_unknown_field_is_an_error_with_a_suggestion() -> None:
    line = only_issue(
        """
        type: task
        comands:
          - echo hi
        """
    )
    assert line == "bad.yml:2: comands: unknown field (did you mean 'commands'?)"


def test_field_of_another_type_says_which_type_takes_it() -> None:
    line = only_issue(
        """
        type: task
        commands: [echo hi]
        replicas: 2
        """
    )
    assert line == "bad.yml:3: replicas: not a field of a task: only service takes it"


def test_unknown_nested_field() -> None:
    line = only_issue(
        """
        type: service
        port: 80
        commands: [serve]
        replicas: 1..2
        scaling:
          target: 5
          scale_up_dealy: 1m
        """
    )
    assert line == "bad.yml:7: scaling.scale_up_dealy: unknown field (did you mean 'scale_up_delay'?)"


def test_service_needs_a_port() -> None:
    assert only_issue(
        """
        type: service
        commands: [serve]
        """
    ).startswith("bad.yml:1: port: required field is missing")


def test_task_needs_commands_unless_it_has_an_image() -> None:
    line = only_issue(
        """
        type: task
        name: no-commands
        """
    )
    assert line.startswith("bad.yml:1: commands: required")
    load_configuration_text("type: task\nimage: ubuntu\n", "ok.yml")


def test_dev_environment_ide_is_optional() -> None:
    # As in dstack: without an IDE the environment is reached over SSH only (docs/attach.md).
    conf = load_configuration_text("type: dev-environment\n", "dev.yml").configuration
    assert isinstance(conf, DevEnvironmentConfiguration) and conf.ide is None


def test_dev_environment_ide_must_be_known() -> None:
    line = only_issue("type: dev-environment\nide: emacs\n")
    assert line.startswith("bad.yml:2: ide: should be 'vscode', 'cursor', 'windsurf' or 'zed', got 'emacs'")


@pytest.mark.parametrize("nodes", ["0", "-1"])
def test_nodes_at_least_one(nodes: str) -> None:
    line = only_issue(f"type: task\ncommands: [x]\nnodes: {nodes}\n")
    assert line.startswith("bad.yml:3: nodes: should be greater than or equal to 1")


@pytest.mark.parametrize("priority", ["101", "-1"])
def test_priority_in_0_100(priority: str) -> None:
    line = only_issue(f"type: task\ncommands: [x]\npriority: {priority}\n")
    assert line.startswith("bad.yml:3: priority: should be")


@pytest.mark.parametrize("cron", ["61 * * * *", "every day", "* * * * * *"])
def test_bad_cron(cron: str) -> None:
    line = only_issue(
        f"""
        type: task
        commands: [x]
        schedule:
          cron:
            - "0 * * * *"
            - "{cron}"
        """
    )
    assert line.startswith(f"bad.yml:6: schedule.cron.1: invalid cron expression '{cron}'")


def test_empty_schedule() -> None:
    line = only_issue("type: task\ncommands: [x]\nschedule:\n  cron: []\n")
    assert line.startswith("bad.yml:4: schedule.cron: ")


def test_image_and_python_are_mutually_exclusive() -> None:
    line = only_issue(
        """
        type: task
        image: ubuntu
        python: "3.11"
        commands: [x]
        """
    )
    assert line == "bad.yml:3: python: cannot be used with `image`: the image decides the Python"


def test_python_version_read_as_a_number() -> None:
    line = only_issue("type: task\ncommands: [x]\npython: 3.10\n")
    assert line.startswith("bad.yml:3: python: write the version as a string, e.g. '3.10'")


def test_replicas_range_needs_scaling() -> None:
    line = only_issue(
        """
        type: service
        port: 8000
        commands: [serve]
        replicas: 1..3
        """
    )
    assert line == "bad.yml:4: replicas: a range of replicas needs `scaling` to choose a count within it"


def test_scaling_needs_a_replicas_range() -> None:
    line = only_issue(
        """
        type: service
        port: 8000
        commands: [serve]
        replicas: 2
        scaling:
          metric: rps
          target: 10
        """
    )
    assert line.startswith("bad.yml:5: scaling: needs `replicas` to be a range")


@pytest.mark.parametrize(
    ("replicas", "reason"),
    [
        ("0", "at least 1"),
        ("1..", "needs a maximum"),
        ("3..1", "below the minimum"),
        ("many", "expected"),
        ("1.5", "expected a number of replicas"),
        ("{min: 1}", "max: required field is missing"),
    ],
)
def test_bad_replicas(replicas: str, reason: str) -> None:
    line = only_issue(f"type: service\nport: 80\ncommands: [x]\nreplicas: {replicas}\n")
    assert line.startswith("bad.yml:4: replicas")
    assert reason in line


def test_scaling_target_must_be_positive() -> None:
    line = only_issue("type: service\nport: 80\ncommands: [x]\nreplicas: 0..2\nscaling:\n  target: 0\n")
    assert line.startswith("bad.yml:6: scaling.target: should be greater than 0")


@pytest.mark.parametrize("field", ["max_duration", "stop_duration", "idle_duration"])
def test_bad_duration(field: str) -> None:
    line = only_issue(f"type: task\ncommands: [x]\n{field}: 5 years\n")
    assert line == f"bad.yml:3: {field}: expected a duration such as 90s, 5m, 1h, 2d or 1w, got '5 years'"


def test_bad_retry_duration() -> None:
    line = only_issue("type: task\ncommands: [x]\nretry:\n  duration: soon\n")
    assert line.startswith("bad.yml:4: retry.duration: expected a duration")


def test_bad_retry_event() -> None:
    line = only_issue("type: task\ncommands: [x]\nretry:\n  on_events:\n    - error\n    - oom\n")
    assert (
        line == "bad.yml:6: retry.on_events.1: should be 'no-capacity', 'interruption' or 'error', got 'oom'"
    )


def test_retry_needs_an_event() -> None:
    line = only_issue("type: task\ncommands: [x]\nretry:\n  on_events: []\n")
    assert line.startswith("bad.yml:4: retry.on_events: name at least one")


def test_retry_of_the_wrong_kind() -> None:
    assert only_issue("type: task\ncommands: [x]\nretry: sometimes\n").startswith(
        "bad.yml:3: retry: expected true"
    )


def test_bad_gpu() -> None:
    line = only_issue(
        """
        type: task
        commands: [x]
        resources:
          cpu: 2..
          gpu: A100:x
        """
    )
    assert line.startswith("bad.yml:5: resources.gpu: ")
    assert "A100:x" in line


def test_bad_memory() -> None:
    line = only_issue("type: task\ncommands: [x]\nresources:\n  memory: lots\n")
    assert line.startswith("bad.yml:4: resources.memory: ")


def test_unknown_resource() -> None:
    line = only_issue("type: task\ncommands: [x]\nresources:\n  gpus: 1\n")
    assert line.startswith("bad.yml:4: resources.gpus: unknown field")


@pytest.mark.parametrize(
    ("env", "path", "reason"),
    [
        ("env:\n  - A=1\n  - 1B=2\n", "env.1", "invalid variable name '1B'"),
        ("env:\n  - A=1\n  - A=2\n", "env.1", "A is set twice"),
        ("env:\n  - A=1\n  - [B]\n", "env.1", "expected KEY=VALUE"),
        ("env:\n  A: 1\n  B: [x]\n", "env.B", "expected a string, a number or nothing"),
        ("env:\n  A-B: 1\n", "env.A-B", "invalid variable name"),
        ("env: A=1\n", "env", "expected a map of NAME: value or a list of NAME=value"),
    ],
)
def test_bad_env(env: str, path: str, reason: str) -> None:
    line = only_issue("type: task\ncommands: [x]\n" + env)
    expected_line = 3 if path == "env" else 5 if path == "env.1" else 4 + (path == "env.B")
    assert line.startswith(f"bad.yml:{expected_line}: {path}: "), line
    assert reason in line


@pytest.mark.parametrize(
    ("volume", "path", "reason"),
    [
        ("data", "volumes.0", "expected name:/path"),
        ("data:relative", "volumes.0.path", "must be absolute"),
        ("Data:/data", "volumes.0.name", "invalid name 'Data'"),
        ("{name: data}", "volumes.0.path", "required field is missing"),
        ("{instance_path: relative, path: /x}", "volumes.0.instance_path", "must be absolute"),
        ("{name: data, path: /d, optional: true}", "volumes.0.optional", "unknown field"),
        ("42", "volumes.0", "expected name:/path"),
    ],
)
def test_bad_volume(volume: str, path: str, reason: str) -> None:
    line = only_issue(f"type: task\ncommands: [x]\nvolumes:\n  - {volume}\n")
    assert line.startswith(f"bad.yml:4: {path}: "), line
    assert reason in line


@pytest.mark.parametrize(
    ("port", "reason"),
    [("70000", "out of range"), ("'80:x'", "expected a port"), ("true", "expected a port")],
)
def test_bad_port(port: str, reason: str) -> None:
    line = only_issue(f"type: task\ncommands: [x]\nports:\n  - 8080\n  - {port}\n")
    assert line.startswith("bad.yml:5: ports.1: ")
    assert reason in line


def test_bad_service_port() -> None:
    assert only_issue("type: service\ncommands: [x]\nport: 0\n").startswith("bad.yml:3: port: port 0 is out")


def test_bad_name() -> None:
    line = only_issue("type: task\nname: My_Task\ncommands: [x]\n")
    assert line.startswith("bad.yml:2: name: invalid name 'My_Task'")


def test_command_written_as_a_mapping() -> None:
    line = only_issue("type: task\ncommands:\n  - echo ok\n  - echo a: b\n")
    assert line.startswith("bad.yml:4: commands.1: a command with `: ` in it must be quoted")


def test_bad_stop_criteria() -> None:
    line = only_issue("type: task\ncommands: [x]\nnodes: 2\nstop_criteria: first-done\n")
    assert line.startswith("bad.yml:4: stop_criteria: should be 'all-done' or 'master-done'")


def test_bad_probe() -> None:
    line = only_issue("type: service\nport: 80\ncommands: [x]\nprobes:\n  - url: health\n")
    assert line.startswith("bad.yml:5: probes.0.url: expected a path starting with /")


def test_bad_shell() -> None:
    assert only_issue("type: task\ncommands: [x]\nshell: zsh\n").startswith("bad.yml:3: shell: expected sh")


def test_bad_loose_field_type() -> None:
    line = only_issue("type: task\ncommands: [x]\nspot_policy: sometimes\n")
    assert line.startswith("bad.yml:3: spot_policy: should be 'spot', 'on-demand' or 'auto'")


def test_several_issues_one_line_each_in_file_order() -> None:
    found = issues(
        """
        type: task
        nodes: 0
        commands: [x]
        priority: 500
        comands: [y]
        """
    )
    assert [line.split(":")[1] for line in found] == ["2", "4", "5"]


# --- fleets ------------------------------------------------------------------------------------------


def test_fleet_needs_hosts_or_nodes() -> None:
    line = only_issue("type: fleet\nname: empty\n")
    assert line == "bad.yml:1: nodes: required: a fleet needs `nodes` or `ssh_config.hosts`"


def test_fleet_with_hosts_and_nodes() -> None:
    line = only_issue("type: fleet\nnodes: 2\nssh_config:\n  user: u\n  hosts: [a]\n")
    assert line.startswith("bad.yml:2: nodes: cannot be used with `ssh_config`")


def test_ssh_config_needs_hosts() -> None:
    line = only_issue("type: fleet\nssh_config:\n  user: ubuntu\n")
    assert line == "bad.yml:2: ssh_config.hosts: required field is missing"


def test_ssh_host_needs_a_user() -> None:
    line = only_issue(
        """
        type: fleet
        ssh_config:
          hosts:
            - hostname: 10.0.0.1
              user: alice
            - 10.0.0.2
        """
    )
    assert line.startswith("bad.yml:6: ssh_config.hosts.1: no user to log in as")


def test_ssh_host_listed_twice() -> None:
    line = only_issue(
        "type: fleet\nssh_config:\n  user: u\n  hosts:\n    - a.example\n    - hostname: a.example\n"
    )
    assert line == "bad.yml:6: ssh_config.hosts.1.hostname: a.example is listed twice"


def test_ssh_host_field_typo() -> None:
    line = only_issue("type: fleet\nssh_config:\n  user: u\n  hosts:\n    - hostname: a\n      prot: 22\n")
    assert line == "bad.yml:6: ssh_config.hosts.0.prot: unknown field (did you mean 'port'?)"


def test_ssh_host_with_user_in_hostname() -> None:
    line = only_issue("type: fleet\nssh_config:\n  user: u\n  hosts:\n    - root@a\n")
    assert line.startswith("bad.yml:5: ssh_config.hosts.0.hostname: expected a hostname")


@pytest.mark.parametrize(("blocks", "reason"), [("0", "greater than or equal to 1"), ("many", "'auto'")])
def test_bad_blocks(blocks: str, reason: str) -> None:
    line = only_issue(f"type: fleet\nnodes: 1\nblocks: {blocks}\n")
    assert line.startswith("bad.yml:3: blocks: ")
    assert reason in line


def test_fleet_nodes_range_order() -> None:
    line = only_issue("type: fleet\nnodes:\n  min: 1\n  target: 3\n  max: 2\n")
    assert line.startswith("bad.yml:5: nodes.max: below the target")


# --- types and files ---------------------------------------------------------------------------------


def test_unknown_type() -> None:
    line = only_issue("type: job\ncommands: [x]\n")
    assert line == (
        "bad.yml:1: type: unknown type 'job': "
        "expected one of task, service, dev-environment, fleet, volume, slurm"
    )


def test_missing_type() -> None:
    line = only_issue("name: x1\ncommands: [x]\n")
    assert line == (
        "bad.yml:1: type: required field is missing: "
        "expected one of task, service, dev-environment, fleet, volume, slurm"
    )


def test_yaml_syntax_error() -> None:
    line = only_issue("type: task\ncommands: [echo hi\nnodes: 2\n")
    assert line.startswith("bad.yml:3:")
    assert "invalid YAML" in line


def test_yaml_bad_indentation() -> None:
    line = only_issue("type: task\ncommands:\n  - echo\n bad: 1\n")
    assert line.startswith("bad.yml:4:")
    assert "invalid YAML" in line


def test_duplicate_key() -> None:
    line = only_issue("type: task\ncommands: [x]\nnodes: 1\nnodes: 2\n")
    assert line == "bad.yml:4: nodes: duplicate key (first at line 3)"


def test_several_documents() -> None:
    line = only_issue("type: task\ncommands: [x]\n---\ntype: task\ncommands: [y]\n")
    assert line.startswith("bad.yml:4:")  # the second document's first line
    assert "holds 2 YAML documents: one configuration per file" in line


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "a str value")])
def test_file_that_is_not_a_mapping(text: str, kind: str) -> None:
    assert only_issue(text) == f"bad.yml:1: expected a mapping of fields at the top level, got {kind}"


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    assert only_issue(text).startswith("bad.yml: is empty: expected a mapping with `type`")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(tmp_path / "nope.yml")
    assert str(caught.value) == f"{tmp_path / 'nope.yml'}: no such file"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a directory, not a configuration file"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes("type: task\ncommands: [caf\xe9]\n".encode("latin-1"))
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(path)
    assert str(caught.value).startswith(f"{path}: is not UTF-8 text")


def test_file_issue_names_the_file_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("conf").mkdir()
    Path("conf/bad.yml").write_text("type: task\ncommands: [x]\nnodes: 0\n")
    with pytest.raises(ConfigurationError) as caught:
        load_configuration("conf/bad.yml")
    assert str(caught.value).startswith("conf/bad.yml:3: nodes: ")


def test_issue_formatting() -> None:
    assert str(ConfigIssue("f.yml", 7, "resources.gpu", "bad")) == "f.yml:7: resources.gpu: bad"
    assert str(ConfigIssue("f.yml", 2, "", "invalid YAML", column=5)) == "f.yml:2:5: invalid YAML"
    assert str(ConfigIssue("f.yml", None, "", "no such file")) == "f.yml: no such file"
