"""griffe extension for the API reference (mkdocstrings, ``extensions:`` in mkdocs.yml).

Presentation only; it never hides a docstring error (griffe still parses every docstring, and
strict mode still fails on its warnings):

* Sphinx roles (``:func:`x```, ``:class:`~a.b```) become code spans: the docstrings are
  written for both Sphinx-style readers and the terminal.
* The project's headed blocks ``Attributes (H stages, S states):``, ``Static fields (...):``,
  ``Numeric fields (...):`` and ``Args (...):`` keep their legend as a sentence and become
  Google sections (``Attributes:`` / ``Args:``), so they render as tables with the annotated
  types instead of preformatted text.
* A section header (``Returns:``, ``Raises:``, ...) right under the previous section gets
  the blank line above it that griffe needs to recognise it.
* Each learner module's ``make_learner, make_train, policy_table, policy =
  scaffold.interface(ALGORITHM)`` becomes four documented functions with the scaffold's
  signature (without its ``algo`` argument) and docstring; static analysis alone would show
  four undocumented attributes. A scaffold function that is renamed or gone fails the build.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc|const):`~?([^`]+)`")
_HEADED = re.compile(
    r"^(?P<indent>[ \t]*)(?P<head>Attributes|Args|Static fields|Numeric fields) \((?P<legend>.*)\):[ \t]*$",
    re.MULTILINE,
)
_SECTION = {"Attributes": "Attributes", "Static fields": "Attributes", "Numeric fields": "Attributes", "Args": "Args"}
_INTERFACE = re.compile(r"^(\w+(?:\s*,\s*\w+)*)\s*=\s*scaffold\.interface\(")


def _interface_line(module: griffe.Module) -> tuple[int, list[str]]:
    """(line number, names) of the module's ``a, b, ... = scaffold.interface(ALGORITHM)``
    (griffe does not create attributes from tuple assignments), or (0, [])."""
    for i, line in enumerate(module.lines, start=1):
        match = _INTERFACE.match(line)
        if match:
            return i, [n.strip() for n in match[1].split(",")]
    return 0, []


def _headed(match: re.Match) -> str:
    indent, head, legend = match["indent"], match["head"], match["legend"]
    lead = f"{head} ({legend}):" if head.endswith("fields") else f"{legend[:1].upper()}{legend[1:]}."
    return f"{indent}{lead}\n\n{indent}{_SECTION[head]}:"


# Google section headers that griffe recognises only after a blank line; the code's docstrings
# often stack "Args:", "Returns:" and "Raises:" without one.
_SECTION_HEADER = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Other Parameters|Returns|Return|"
    r"Yields|Receives|Raises|Warns|Attributes|Examples?|Notes?|Warnings?|See Also):\s*$"
)


def _blank_before_sections(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    for line in lines:
        if _SECTION_HEADER.match(line) and out and out[-1].strip():
            out.append("")
        out.append(line)
    return "\n".join(out)


def rewrite(text: str) -> str:
    """The docstring ``text`` as rendered (module docstring): roles -> code, headed blocks ->
    Google sections, a blank line above every section header."""
    return _blank_before_sections(_HEADED.sub(_headed, _ROLE.sub(r"``\1``", text)))


class FhcDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != "fhc_jax":
            return
        scaffold = pkg["algos.core.scaffold"]
        for module in pkg["algos"].modules.values():
            lineno, names = _interface_line(module)
            for name in names:
                template = scaffold[name]  # KeyError: the scaffold lost a public function
                params = list(template.parameters)
                if not params or params[0].name != "algo":
                    raise ValueError(f"griffe_fhc: fhc_jax.algos.core.scaffold.{name} no longer takes algo first")
                fn = griffe.Function(
                    name,
                    lineno=lineno,
                    endlineno=lineno,
                    parameters=griffe.Parameters(
                        *(
                            griffe.Parameter(p.name, annotation=p.annotation, kind=p.kind, default=p.default)
                            for p in params[1:]
                        )
                    ),
                    returns=template.returns,
                )
                note = (
                    f"\n\n``fhc_jax.algos.core.scaffold.{name}`` bound to this module's ``ALGORITHM`` "
                    "by ``scaffold.interface``."
                )
                fn.docstring = griffe.Docstring(
                    template.docstring.value + note,
                    lineno=lineno,
                    parent=fn,
                    parser=template.docstring.parser,
                    parser_options=template.docstring.parser_options,
                )
                module.set_member(name, fn)
