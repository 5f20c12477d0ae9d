"""Reading a config file: YAML, strictly (a key given twice is an error, not the last one
silently), every failure one `ConfigFileError` line naming the file, line and column."""

from __future__ import annotations

from pathlib import Path

import yaml


class ConfigFileError(ValueError):
    """A config file that cannot be read or is not a YAML mapping; the message names it."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML whose mappings refuse a key given twice: plain YAML keeps the last one without a
    word, so `bootstrap:` written twice in a configfile would silently drop the first."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    f"while reading the mapping started at line {seen[key] + 1}",
                    None,
                    f"duplicate key '{key}'",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from `path`; a missing file or a syntax error is one ConfigFileError
    line naming the file (and the line and column, as the user's editor counts them)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as exc:

        def at(mark) -> str:
            return f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""

        started = f"; {exc.context} at {at(exc.context_mark)}" if exc.context_mark else ""
        where = f", {at(exc.problem_mark)}" if exc.problem_mark else ""
        raise ConfigFileError(f"{path}{where}: not valid YAML ({exc.problem}{started})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"{path}: must be a mapping of config keys, not a {type(data).__name__}"
        )
    return data
