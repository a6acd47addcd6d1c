"""The configuration reference, read from the schema itself: every key, type, default, meaning.

The schema's modules (flywheel/config/schema/) document each field once, in the comment
beside its definition; the keys of PipelineConfig's key groups are its own (top level). This module
reads those comments back (with `tokenize`, so nothing in the schema needs a docstring
form) and pairs them with the dataclasses' types and defaults, giving the documentation
site's configuration page and a check that no field is left unexplained.

Which comment documents a field:

- the full-line comments directly above it (no blank line between), or
- a trailing comment on its line (`val_batch_size: int = 0  # 0 = the whole set`), or
- for a field with neither, the comment above the field just before it, when that comment
  names this field (`# tis: ratio truncated to [tis_lower_bound, tis_upper_bound]` covers
  both bounds) and no blank line separates the two fields.

A field matching none of these is reported by `undocumented()`; a test keeps that empty.
Only reads: importing this module touches no files until a function is called.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
import tokenize
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.algorithms.policy_loss import params as policy_loss_params
from flywheel.config import schema
from flywheel.config.acts_when.check import table_markdown
from flywheel.config.schema.pipeline import FIELD_GROUPS

# The schema's modules, read in this order (flywheel/config/schema/__init__.py lists them),
# then the loss knobs, which are declared beside the losses that read them.
SCHEMA_PATHS = (*sorted(Path(schema.__file__).parent.glob("*.py")),
                Path(policy_loss_params.__file__))
# The placeholder shown for a key the user chooses, by the dict field holding it.
DICT_KEYS = {"custom_envs": "<tag>", "rewards": "<name>"}
# Role blocks, written `<role>` where a block appears under each of them.
ROLE_PATHS = ("actor_train", "actor_infer", "reference", "critic", "rewards.<name>",
              "teacher.<name>")


@dataclass
class FieldDoc:
    name: str
    type: str  # as a reader would write the value: `"ppo" | "tis"`, `list[int] | null`
    default: str  # YAML-like rendering of the default; a nested block links to its section
    doc: str  # the comment beside the definition, joined into one paragraph
    line: int  # line in the module that declares it (SCHEMA_PATHS)
    block: type | None = None  # the dataclass of a nested block, if the field is one


@dataclass
class Section:
    cls: type
    paths: list[str]  # where this block appears, e.g. ["actor_train.model_args", ...]
    intro: str  # the class docstring, if any
    fields: list[FieldDoc] = field(default_factory=list)
    base: type | None = None  # a config class this one extends (its keys apply too)

    @property
    def anchor(self) -> str:
        return self.cls.__name__.lower()


# ---- comments beside fields ------------------------------------------------------------


def _comments(source: str) -> tuple[dict[int, str], dict[int, str]]:
    """Full-line comments and trailing comments, by line number."""
    full, trailing = {}, {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        row, col = tok.start
        text = tok.string.lstrip("#").strip()
        if lines[row - 1][:col].strip():
            trailing[row] = text
        else:
            full[row] = text
    return full, trailing


def field_comments(source: str | None = None) -> dict[tuple[str, str], tuple[str, int]]:
    """(class name, field name) -> (comment text, line) for every dataclass field in the
    source; the text is "" for an undocumented field."""
    if source is None:
        out: dict[tuple[str, str], tuple[str, int]] = {}
        for path in SCHEMA_PATHS:
            out.update(field_comments(path.read_text(encoding="utf-8")))
        return out
    full, trailing = _comments(source)
    out = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        prev_doc, prev_end = "", -10
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                prev_doc, prev_end = "", -10
                continue
            name = stmt.target.id
            above, row = [], stmt.lineno - 1
            while row in full:
                above.insert(0, full[row])
                row -= 1
            own = " ".join(above)
            tail = trailing.get(stmt.end_lineno) or trailing.get(stmt.lineno, "")
            doc = " ".join(p for p in (own, tail) if p)
            if not doc and stmt.lineno == prev_end + 1 and re.search(
                    rf"\b{re.escape(name)}\b", prev_doc):
                doc = prev_doc  # a comment that names the fields it covers; it goes on
            else:
                prev_doc = own  # a trailing comment covers its own line only
            prev_end = stmt.end_lineno
            out[(node.name, name)] = (doc, stmt.lineno)
    return out


# ---- types and defaults ----------------------------------------------------------------


def _is_config_class(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _nested_block(tp: object) -> tuple[type | None, bool]:
    """The dataclass inside a field's type, and whether it sits in a dict (one per key) or
    a list (one per item)."""
    if _is_config_class(tp):
        return tp, False
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is not type(None) and _is_config_class(arg):
                return arg, False
    if origin is dict and len(args) == 2 and _is_config_class(args[1]):
        return args[1], True
    if origin is list and len(args) == 1 and _is_config_class(args[0]):
        return args[0], True
    return None, False


def format_type(tp: object) -> str:
    if tp is type(None):
        return "null"
    if _is_config_class(tp):
        return "block"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(format_type(a) for a in args)
    if origin is list:
        return f"list[{format_type(args[0])}]"
    if origin is dict:
        return f"dict[{format_type(args[0])}, {format_type(args[1])}]"
    if tp is typing.Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def format_default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(block)"
    if isinstance(value, dict) and value and all(dataclasses.is_dataclass(v) for v in
                                                 value.values()):
        return ", ".join(f"`{k}`" for k in value)
    return f"`{json.dumps(value)}`"


# ---- the reference ---------------------------------------------------------------------


def sections(root: type = schema.PipelineConfig) -> list[Section]:
    """One section per config class reached from `root`, in the order first met (top level
    first), each with the key paths where that block appears."""
    comments = field_comments()
    found: dict[type, Section] = {}
    order: list[type] = []

    def visit(cls: type, path: str) -> None:
        section = found.get(cls)
        if section is None:
            base = next((b for b in cls.__mro__[1:]
                         if _is_config_class(b) and b not in FIELD_GROUPS), None)
            section = found[cls] = Section(cls=cls, paths=[], intro=_docstring(cls), base=base)
            order.append(cls)
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                owner = field_owner(cls, f.name)
                if owner is None:
                    continue  # documented in the base class's section
                doc, line = comments.get((owner.__name__, f.name), ("", 0))
                section.fields.append(FieldDoc(
                    name=f.name, type=format_type(hints[f.name]), default=format_default(f),
                    doc=doc, line=line, block=_nested_block(hints[f.name])[0]))
        if path in section.paths:
            return
        section.paths.append(path)
        if section.base is not None:
            visit(section.base, path)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            block, suffix = _nested_block(hints[f.name])
            if block is not None:
                key = DICT_KEYS.get(f.name, "<name>") if suffix else ""
                child = f"{path}.{f.name}" if path else f.name
                if typing.get_origin(hints[f.name]) is list:
                    visit(block, f"{child}[i]")
                else:
                    visit(block, f"{child}.{key}" if key else child)

    visit(root, "")
    return [found[c] for c in order]


def field_owner(cls: type, name: str) -> type | None:
    """The class whose source documents `cls`'s field `name` in `cls`'s section: `cls` itself,
    or the field group it composes that declares it (a key group of PipelineConfig, the loss
    knobs); None when a base class's section does."""
    for owner in (cls, *(b for b in cls.__mro__[1:] if b in FIELD_GROUPS)):
        if name in owner.__dict__.get("__annotations__", {}):
            return owner
    return None


def undocumented(root: type = schema.PipelineConfig) -> list[str]:
    """`Class.field (config/schema/MODULE.py:LINE)` for every field with no comment beside it."""
    return [f"{s.cls.__name__}.{f.name} "
            f"({_module_path(field_owner(s.cls, f.name))}:{f.line})"
            for s in sections(root) for f in s.fields if not f.doc]


def _module_path(cls: type) -> str:
    """`config/schema/roles.py`: where `cls` is declared, from the package root."""
    return cls.__module__.removeprefix("flywheel.").replace(".", "/") + ".py"


def _docstring(cls: type) -> str:
    own = cls.__dict__.get("__doc__") or ""
    if own.startswith(cls.__name__ + "("):  # dataclass's generated signature, not prose
        return ""
    return " ".join(line.strip() for line in own.strip().splitlines() if line.strip())


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def section_key_paths(section: Section) -> list[str]:
    """The section's paths, a path under every role block written once as `<role>...`."""
    out: list[str] = []
    for path in section.paths:
        head = next((r for r in ROLE_PATHS if path == r or path.startswith(r + ".")), None)
        if head is not None and all(r + path[len(head):] in section.paths
                                    for r in ROLE_PATHS):
            path = "<role>" + path[len(head):]
        if path not in out:
            out.append(path)
    return out


def section_title(section: Section) -> str:
    if section.paths == [""]:
        return "Top level"
    return ", ".join(f"`{p}`" for p in section_key_paths(section))


def render_markdown(root: type = schema.PipelineConfig) -> str:
    """The configuration reference page (Markdown, one table per config block)."""
    all_sections = sections(root)
    by_cls = {s.cls: s for s in all_sections}
    out = [
        "# Configuration reference",
        "",
        "Generated from `flywheel/config/schema/` when the site is built: every "
        "key a flywheel YAML file accepts, its type, its default and what it means, taken "
        "from the comment beside the field's definition. A key path such as "
        "`actor_train.training_args.learning_rate` is also what a command-line override "
        "names (`platform run --config F.yaml actor_train.training_args.learning_rate=1e-5`), "
        "and `platform show-config --config F.yaml` prints every value a file resolves to.",
        "",
        "`<role>` stands for any role block (`actor_train`, `actor_infer`, `reference`, "
        "`critic`, `rewards.<name>`, `teacher.<name>`); `<name>` and `<tag>` for a key you "
        "choose. A type "
        "`a | b` lists the accepted values; `null` means the key may be left unset.",
        "",
    ]
    for s in all_sections:
        if not s.fields:
            continue
        out += [f"## {section_title(s)} {{#{s.anchor}}}", ""]
        if s.intro:
            out += [_md(s.intro), ""]
        if s.base is not None and s.base in by_cls:
            b = by_cls[s.base]
            out += [f"Every key of [{section_title(b)}](#{b.anchor}) applies here too; the "
                    "keys below are added or given another default.", ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for f in s.fields:
            doc = _md(f.doc)
            if f.block is not None:
                target = by_cls[f.block]
                doc += f" Keys: [{section_title(target)}](#{target.anchor})."
            out.append(f"| `{f.name}` | {f.type} | {f.default} | {doc} |")
        out.append("")
    out += table_markdown()
    return "\n".join(out)
