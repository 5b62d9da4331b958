"""Hand-built models and predictors for the advice, filter, emit and suggest tests (no GPU, no tracing)."""

from __future__ import annotations

from dataclasses import dataclass

from fp8advisor.inspect.records import GemmLayer, LayerStatus, ModelLayers
from fp8advisor.recipes import Recipe

#: Llama-3-8B block shapes (torchtitan names): (K, N) per Linear.
LLAMA_BLOCK = {
    "attention.wq": (4096, 4096),
    "attention.wk": (4096, 1024),
    "attention.wv": (4096, 1024),
    "attention.wo": (4096, 4096),
    "feed_forward.w1": (4096, 14336),
    "feed_forward.w2": (14336, 4096),
    "feed_forward.w3": (4096, 14336),
}


def layer(
    fqn: str,
    K: int,
    N: int,
    M: int | tuple[int, ...] = 8192,
    status: LayerStatus = LayerStatus.TRACED,
    *,
    is_linear: bool = True,
    reason: str | None = None,
) -> GemmLayer:
    calls = (M,) if isinstance(M, int) else tuple(M)
    if status is LayerStatus.NOT_CALLED:
        calls = ()
    return GemmLayer(fqn, "Linear" if is_linear else "Parameter", K, N, calls, status, reason, is_linear)


def llama_layers(n_layers: int = 80, tokens: int = 8192, vocab: int = 128256) -> ModelLayers:
    """A Llama-3-shaped model: n_layers blocks of seven Linear layers and the `output` head."""
    layers = [
        layer(f"layers.{i}.{name}", K, N, tokens)
        for i in range(n_layers)
        for name, (K, N) in LLAMA_BLOCK.items()
    ]
    layers.append(layer("output", 4096, vocab, tokens))
    return ModelLayers(f"llama_like(n_layers={n_layers})", 1, tokens, tuple(layers))


def prefix_conflict_layers(tokens: int = 8192) -> ModelLayers:
    """`blocks.0.ff` (small: bf16) is a substring of `blocks.0.ff2` (large: float8)."""
    layers = (
        layer("blocks.0.ff", 256, 256, tokens),
        layer("blocks.0.ff2", 8192, 8192, tokens),
        layer("blocks.0.proj", 8192, 8192, tokens),
    )
    return ModelLayers("prefix_model.py", 1, tokens, layers)


@dataclass(frozen=True)
class StubSpeedup:
    speedup: float
    provenance: str
    how: str = "interpolated"
    profile: str = "stub"


@dataclass(frozen=True)
class StubTimes:
    bf16_s: float
    float8_s: float
    speedup: StubSpeedup


class StubPredictor:
    """A stand-in for `predict.predicted_times_s`: bf16 time = 2*M*K*N*3 / 1e15 s, speedup from a rule.

    Default rule: 0.8x when K*N < 2**22 (small layers lose), else 1.0 + log2(K*N / 2**22) / 10. `per_recipe`
    scales the speedup per recipe; `provenance` gives each recipe's provenance. Records every call.
    """

    def __init__(self, rule=None, per_recipe=None, provenance=None):
        self.rule = rule or self.default_rule
        self.per_recipe = per_recipe or {}
        self.provenance = provenance or {}
        self.calls: list[tuple[str, int, int, int]] = []

    @staticmethod
    def default_rule(M: int, K: int, N: int) -> float:
        import math

        size = K * N
        return 0.8 if size < 2**22 else 1.0 + math.log2(size / 2**22) / 10

    def __call__(self, recipe: Recipe, M: int, K: int, N: int) -> StubTimes:
        self.calls.append((Recipe(recipe).value, M, K, N))
        speedup = self.rule(M, K, N) * self.per_recipe.get(Recipe(recipe).value, 1.0)
        bf16 = 6 * M * K * N / 1e15
        provenance = self.provenance.get(Recipe(recipe).value, "published")
        return StubTimes(bf16, bf16 / speedup, StubSpeedup(speedup, provenance))


class StubChoice:
    """A `ProfileChoice` stand-in: a name, a provenance, the recipes it covers."""

    def __init__(self, name="stub-profile", provenance="published", recipes=tuple(r.value for r in Recipe)):
        self.name = name
        self.provenance = provenance
        self.recipes = set(recipes)
        self.path = None

    def covers(self, recipe) -> bool:
        return Recipe(recipe).value in self.recipes

    def describe(self) -> str:
        return f"{self.name} ({self.provenance}, stub)"


def modelled_choice():
    """A real in-memory `ProfileChoice`: the H100 roofline model for every recipe an H100 runs (provenance
    modelled)."""
    from fp8advisor.gpus import GPU_SPECS, recipes_for_family
    from fp8advisor.predict.profile import DeviceInfo, Profile, RecipeProfile
    from fp8advisor.predict.selection import ProfileChoice

    profile = Profile(
        name="test-h100-roofline",
        provenance="modelled",
        source="tests",
        created="2026-11-22",
        device=DeviceInfo("NVIDIA H100 80GB HBM3", "H100", (9, 0)),
        recipes={r.value: RecipeProfile(model={"fused": True}) for r in recipes_for_family("H100")},
        roofline=GPU_SPECS["H100"],
    )
    return ProfileChoice(primary=profile, fallback=None, reason="built in the tests")
