"""`${{ dstack.node_rank }}` in a volume's name, as dstack documents it: each node of a multi-node task
names its own volume (`data-${{ dstack.node_rank }}` is `data-0` on node 0, `data-1` on node 1).

dstack interpolates two variables there, both the job's node rank: `dstack.node_rank` and its alias
`dstack.job_num`. Any other `${{ ... }}` is an error, said when the configuration is validated.
"""

from __future__ import annotations

import re

_VARIABLE = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
NODE_RANK_VARIABLES = ("dstack.node_rank", "dstack.job_num")


def variables(template: str) -> list[str]:
    """The variables a template names, in order."""
    return _VARIABLE.findall(template)


def check_template(template: str) -> str:
    """ValueError unless every `${{ ... }}` of `template` is a node rank variable."""
    for name in variables(template):
        if name not in NODE_RANK_VARIABLES:
            raise ValueError(
                f"unknown variable ${{{{ {name} }}}} in {template!r}: a volume's name may use "
                + " or ".join(f"${{{{ {known} }}}}" for known in NODE_RANK_VARIABLES)
            )
    return template


def interpolate(template: str, node_rank: int) -> str:
    """The name a node uses: every node rank variable replaced by `node_rank`."""
    return _VARIABLE.sub(lambda _: str(node_rank), check_template(template))


def is_per_node(template: str) -> bool:
    """Whether each node gets a name of its own."""
    return any(name in NODE_RANK_VARIABLES for name in variables(template))
