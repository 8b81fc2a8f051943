"""Fields and value forms of dstack's configurations that Ferry takes (issue 17): `${{ ... }}` references
where dstack resolves them, node and replica groups, dstack's newer fields, and the messages about what is
wrong."""

from __future__ import annotations

import textwrap

import pytest

from core.configuration import DevEnvironmentConfiguration, ServiceConfiguration, TaskConfiguration
from core.configuration.loading import ConfigurationError, LoadedConfiguration, load_configuration_text


def loaded(text: str) -> LoadedConfiguration:
    return load_configuration_text(textwrap.dedent(text).lstrip("\n"), "x.yml")


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigurationError) as caught:
        loaded(text)
    return [str(issue) for issue in caught.value.issues]


def refusals(text: str) -> list[str]:
    return [str(issue) for issue in loaded(text).refusals()]


# --- ${{ ... }} ---------------------------------------------------------------------------------------


def test_run_args_are_what_ferry_apply_passes_after_the_double_dash() -> None:
    task = loaded(
        "type: task\ncommands: ['python train.py ${{ run.args }}', 'echo $${{ x }}']\n"
    ).configuration
    assert isinstance(task, TaskConfiguration)
    assert task.commands[0] == "python train.py ${{ run.args }}"  # until it is applied
    applied = task.with_run_args(["--lr", "0.1", "two words"])
    assert applied.commands == ["python train.py --lr 0.1 'two words'", "echo $${{ x }}"]
    assert task.with_environment({}).commands[0] == "python train.py "  # no arguments: empty, as in dstack
    assert task.commands[0] == "python train.py ${{ run.args }}"  # the loaded one is left as it was


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "type: task\ncommands: ['echo ${{ run.name }}']\n",
            "x.yml:2: commands.0: unknown variable ${{ run.name }} in 'echo ${{ run.name }}': "
            "commands may use ${{ run.args }}, ${{ secrets.NAME }} or ${{ groups[i].nodes[j].IP_ADDRESS }}",
        ),
        (
            "type: task\ncommands: [x]\nenv: {A: '${{ env.B }}'}\n",
            "x.yml:3: env.A: unknown variable ${{ env.B }} in '${{ env.B }}': a value of env may use "
            "${{ secrets.NAME }}",
        ),
        (
            "type: task\ncommands: [x]\nregistry_auth: {username: u, password: '${{ env.KEY }}'}\n",
            "x.yml:3: registry_auth.password: ${{ env.KEY }}: `env` does not set KEY",
        ),
        (
            "type: task\ncommands: ['echo ${{ run.args']\n",
            "x.yml:2: commands.0: `${{` without its closing `}}` in 'echo ${{ run.args'",
        ),
    ],
)
def test_an_unknown_reference_is_an_error_naming_it(text: str, expected: str) -> None:
    assert errors(text) == [expected]


def test_env_references_are_filled_in_at_apply() -> None:
    service = loaded(
        """
        type: service
        port: 80
        commands: [serve]
        env: [KEY, USER=me]
        registry_auth: {username: '${{ env.USER }}', password: '${{ env.KEY }}'}
        probes: [{url: '/health?k=${{ env.KEY }}', headers: [{name: X-Key, value: '${{ env.KEY }}'}]}]
        """
    ).configuration
    assert isinstance(service, ServiceConfiguration)
    with pytest.raises(ValueError, match="KEY not set"):
        service.with_environment({})
    applied = service.with_environment({"KEY": "s3cret"})
    assert applied.env == {"KEY": "s3cret", "USER": "me"}
    assert applied.registry_auth is not None
    assert (applied.registry_auth.username, applied.registry_auth.password) == ("me", "s3cret")
    assert applied.probes[0].url == "/health?k=s3cret"
    assert applied.probes[0].headers[0].value == "s3cret"


def test_secrets_are_taken_in_env_and_refused_in_commands_with_the_reason() -> None:
    assert refusals("type: task\ncommands: [x]\nenv: ['HF_TOKEN=${{ secrets.hf_token }}']\n") == []
    [reason] = refusals("type: task\ncommands: ['login ${{ secrets.hf_token }}']\n")
    assert reason.startswith("x.yml:2: commands.0: ${{ secrets.hf_token }} is filled in `env` and")


# --- groups -------------------------------------------------------------------------------------------

NODE_GROUPS = """
type: task
groups:
  - name: head
    commands: ['ray start --head']
  - nodes: 2
    commands: ['ray start --address=${{ groups[0].nodes[0].IP_ADDRESS }}:6379']
    resources: {gpu: H100:8}
"""


def test_node_groups_are_validated_and_run() -> None:
    config = loaded(NODE_GROUPS)
    assert isinstance(config.configuration, TaskConfiguration)
    assert [group.name for group in config.configuration.groups or []] == ["head", "1"]
    assert config.configuration.summary().scale == "node groups head 1, 1 2"
    assert config.configuration.nodes_num() == 3
    assert refusals(NODE_GROUPS) == []  # tests/core/test_node_groups.py: how they run


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("nodes[0]", "nodes[5]"),
        ("commands: ['ray start --head']", "commands: []"),
        ("type: task", "type: task\nnodes: 2"),
    ],
)
def test_node_groups_refused_as_dstack_refuses_them(change: str, expected: str) -> None:
    [message] = errors(NODE_GROUPS.replace(change, expected))
    assert any(part in message for part in ("names no node", "each group lists", "cannot be used with"))


def test_a_services_groups_are_its_replica_groups() -> None:
    service = loaded(
        "type: service\nport: 80\ngroups:\n  - {replicas: 1, commands: [a]}\n  - {count: 2, commands: [b]}\n"
    ).configuration
    assert isinstance(service, ServiceConfiguration)
    assert [(group.name, str(group.replicas)) for group in service.groups] == [("0", "1"), ("1", "2")]
    assert errors("type: service\nport: 80\nreplicas: 2\ngroups: [{count: 1, commands: [a]}]\n") == [
        "x.yml:4: groups: cannot be used with `replicas`: give the groups once"
    ]


# --- dstack's other fields ----------------------------------------------------------------------------


def test_newer_fields_are_accepted_and_named() -> None:
    text = """
    type: task
    commands: [x]
    dstack: true
    home_dir: /root
    setup: [echo old]
    fleets: [local-fleet, team-a/gpu-fleet, {project: team-b, name: other}]
    instances: [my-fleet-3, {hostname: 203.0.113.10}, {fleet: my-fleet, instance: 3}]
    backend_options: [{type: aws, efa: true}]
    resources: {gpu: {name: tt-galaxy-wh, count: 32, compute_capability: 7.5}}
    """
    config = loaded(text)
    assert isinstance(config.configuration, TaskConfiguration)
    assert config.configuration.fleets == ["local-fleet", "team-a/gpu-fleet", "team-b/other"]
    assert config.configuration.resources.gpu is not None
    assert config.configuration.resources.gpu.vendor == "tenstorrent"
    assert config.warning() == (
        "x.yml: warning: Ferry does not act on yet: home_dir, setup, "
        "resources.gpu.compute_capability, backend_options"
    )


def test_a_dev_environments_setup_runs_before_its_init() -> None:
    dev = loaded("type: dev-environment\nide: zed\nsetup: [a]\ninit: [b]\n").configuration
    assert isinstance(dev, DevEnvironmentConfiguration)
    assert (dev.init, dev.setup, dev.unsupported_fields()) == (["a", "b"], [], [])
    again = DevEnvironmentConfiguration.model_validate_json(dev.model_dump_json())
    assert again.init == ["a", "b"]


# --- messages -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("comands: [x]\n", "x.yml:3: comands: unknown field (did you mean 'commands'?)"),
        # `volume_id` is a volume's field: no suggestion from another type's fields
        ("volume_ide: a\n", "x.yml:3: volume_ide: unknown field"),
        ("instanse: [a]\n", "x.yml:3: instanse: unknown field (did you mean 'instances'?)"),
        ("gpu: 1\n", "x.yml:3: gpu: not a field of a task: it goes under `resources`"),
        ("resources:\n", "x.yml:3: resources: should be a mapping of fields, got nothing (null)"),
        ("resources: {gpus: 1}\n", "x.yml:3: resources.gpus: unknown field (did you mean 'gpu'?)"),
    ],
)  # fmt: skip
def test_messages_name_the_files_fields_only(text: str, expected: str) -> None:
    assert errors("type: task\ncommands: [x]\n" + text) == [expected]


def test_a_replicas_address_is_refused_with_the_reason() -> None:
    text = (
        "type: service\nport: 80\nreplicas:\n  - {count: 1, commands: [a]}\n"
        "  - {count: 1, commands: ['b --to ${{ groups[0].replicas[0].IP_ADDRESS }}']}\n"
    )
    assert refusals(text) == [
        "x.yml:5: replicas.1.commands.0: ${{ groups[0].replicas[0].IP_ADDRESS }} is not filled in yet: "
        "a job does not know the other groups' addresses"
    ]
