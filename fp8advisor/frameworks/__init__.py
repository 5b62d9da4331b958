"""Stage 2, frameworks: what each training framework's float8 config means, read as the framework reads it.

In: the config formats (torchtitan TOML and Python, NeMo AutoModel, accelerate, torchao, a bare filter list,
Megatron-Core) and a config file. Out: `ConfigFormat`, which Linear layers each framework converts under a
filter (`filters`), and a config file read back as its framework would (`reader.read_config` ->
`FrameworkConfig`), a Python filter evaluated from its syntax without running it (`filter_eval`).

- `formats`: the format list, shared by the writer (`fp8advisor.emit`), the reader and the simulation, and
  the one table of the framework versions each format's file is for (`FORMAT_VERSIONS`); `header`: the
  header a written config carries, read back (`read_header`).
- `filters`: each framework's conversion rule on names and shapes, and torchao's auto filter (simulation).
- `shortest_filter`: the shortest exact filter list (`FilterList`), found by the set-cover search of
  `filter_cover`.
- `reader`: a config FILE -> `FrameworkConfig` (`config_record`: FP8 on?, which recipe, which Linear
  converts), by the reader of its format: `torchtitan_reader`, `yaml_reader` (NeMo AutoModel, a filter list),
  `torchao_reader` (torchao, accelerate).
- `module_rules`: each framework's module filter on a real model, `(module, fqn) -> bool`;
  `expert_conversion`: which grouped MoE expert groups a config converts, converted on a model (the meta
  model) as its framework would (`verify`, `suggest --current`, `trace --config`).
- `python_file`: a Python config read from its syntax tree, never run; `filter_function`: its module filter,
  evaluated by `filter_eval` (in the Python subset of `filter_language`) or, trusted, run alone;
  `module_scope`: which statement binds each name the filter reads, so that what is read is what runs;
  `framework_calls`: the same for each framework call a reader reads (its callee imported once from the
  framework, the function around it bound once, the call reached, its arguments told).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "ConfigFormat": "fp8advisor.frameworks.formats",
    "parse_format": "fp8advisor.frameworks.formats",
    "read_header": "fp8advisor.frameworks.header",
    "SuggestHeader": "fp8advisor.frameworks.header",
    "shortest_exact_filter": "fp8advisor.frameworks.shortest_filter",
    "auto_filter_keeps": "fp8advisor.frameworks.filters",
    "read_config": "fp8advisor.frameworks.reader",
    "FrameworkConfig": "fp8advisor.frameworks.config_record",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
