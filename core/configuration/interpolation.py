"""`${{ ... }}` references in a configuration, where dstack documents them, and which each field takes.

- a volume's name: `${{ dstack.node_rank }}` (alias `dstack.job_num`), each node's rank: a node of a
  multi-node task names its own volume (`data-${{ dstack.node_rank }}` is `data-0` on node 0,
  docs/volumes.md);
- a task's or a service's `commands`: `${{ run.args }}`, the arguments given at apply after `--`, shell-quoted
  (empty without them, as in dstack; BaseRunConfiguration.with_run_args);
  `${{ groups[i].nodes[j].IP_ADDRESS }}` (a task's node groups: filled in once the replica is placed,
  `node_addresses`) or `${{ groups[i].replicas[j].IP_ADDRESS }}` (a service's replica groups);
- `registry_auth` and a probe's `url`, `body` and header values: `${{ env.NAME }}`, a variable of the
  configuration's `env`, taken at apply;
- `env` values and `registry_auth`: `${{ secrets.NAME }}`, a secret of the project (`ferry secret`), filled
  in when the job is sent to its agent (docs/secrets.md); written in commands, as dstack's CLI lets it be,
  core.configuration.runnable refuses it with the reason.

Any other reference is an error that names it, said when the configuration is validated. `$${{` writes
`${{` itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_REFERENCE = re.compile(r"(?<!\$)\$\{\{(.*?)\}\}", re.DOTALL)
_ESCAPED = "$${{"
NODE_RANK_VARIABLES = ("dstack.node_rank", "dstack.job_num")
RUN_ARGS = "run.args"
_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_.]*$")
_GROUP_ADDRESS = re.compile(r"^groups\[(\d+)\]\.(nodes|replicas)\[(\d+)\]\.IP_ADDRESS$")

# What a field's references may name: a predicate over the name, and how the error says what is allowed.
Context = tuple[Callable[[str], bool], str]


def _in_namespace(*namespaces: str) -> Callable[[str], bool]:
    return lambda name: bool(_SIMPLE_NAME.match(name)) and name.split(".", 1)[0] in namespaces


VOLUME_NAME: Context = (
    lambda name: name in NODE_RANK_VARIABLES,
    "a volume's name may use ${{ dstack.node_rank }} or ${{ dstack.job_num }}",
)
ENV_VALUE: Context = (_in_namespace("secrets"), "a value of env may use ${{ secrets.NAME }}")
CREDENTIALS: Context = (
    _in_namespace("env", "secrets"),
    "registry_auth may use ${{ env.NAME }} or ${{ secrets.NAME }}",
)
PROBE: Context = (_in_namespace("env"), "a probe may use ${{ env.NAME }}")


def commands_context(member: str) -> Context:
    """A task's (`member` nodes) or a service's (`replicas`) commands."""

    def allowed(name: str) -> bool:
        address = _GROUP_ADDRESS.match(name)
        if address:
            return address.group(2) == member
        return name == RUN_ARGS or _in_namespace("secrets")(name)

    address = f"${{{{ groups[i].{member}[j].IP_ADDRESS }}}}"
    return allowed, f"commands may use ${{{{ run.args }}}}, ${{{{ secrets.NAME }}}} or {address}"


def variables(template: str) -> list[str]:
    """The names a template refers to, in order; ValueError for a `${{` that is never closed."""
    opened = template.replace(_ESCAPED, "").count("${{")
    found = [match.strip() for match in _REFERENCE.findall(template)]
    if opened > len(found):
        raise ValueError(f"`${{{{` without its closing `}}}}` in {template!r}")
    return found


def check_references(template: str, context: Context) -> str:
    """ValueError naming the first reference of `template` that `context` does not take."""
    allowed, takes = context
    for name in variables(template):
        if not allowed(name):
            raise ValueError(f"unknown variable ${{{{ {name} }}}} in {template!r}: {takes}")
    return template


def substitute(template: str, values: Mapping[str, str]) -> str:
    """`template` with each reference in `values` replaced; the others kept as they are."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        return values.get(name, match.group(0))

    return _REFERENCE.sub(replace, template)


def secrets_in(template: str) -> list[str]:
    return [name for name in variables(template) if name.startswith("secrets.")]


def group_addresses(template: str) -> list[tuple[int, str, int]]:
    """(group, `nodes` or `replicas`, index) of each `${{ groups[i].<member>[j].IP_ADDRESS }}`."""
    found = []
    for name in variables(template):
        address = _GROUP_ADDRESS.match(name)
        if address:
            found.append((int(address.group(1)), address.group(2), int(address.group(3))))
    return found


def node_addresses(node_groups: list[int], node_ips: list[str]) -> dict[str, str]:
    """The value of each `groups[i].nodes[j].IP_ADDRESS` of a task's node groups (`node_groups`: each
    group's node count): the address of the replica's node `sum(node_groups[:i]) + j`, by rank."""
    values = {}
    first = 0
    for group, count in enumerate(node_groups):
        for node in range(min(count, max(len(node_ips) - first, 0))):
            values[f"groups[{group}].nodes[{node}].IP_ADDRESS"] = node_ips[first + node]
        first += count
    return values


def env_names(template: str) -> list[str]:
    return [name.split(".", 1)[1] for name in variables(template) if name.startswith("env.")]


def check_template(template: str) -> str:
    """A volume's name: ValueError unless every reference is a node rank variable."""
    return check_references(template, VOLUME_NAME)


def interpolate(template: str, node_rank: int) -> str:
    """The name a node uses: every node rank variable replaced by `node_rank`."""
    check_template(template)
    return substitute(template, dict.fromkeys(NODE_RANK_VARIABLES, str(node_rank)))


def is_per_node(template: str) -> bool:
    """Whether each node gets a name of its own."""
    return any(name in NODE_RANK_VARIABLES for name in variables(template))
