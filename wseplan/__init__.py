"""wseplan: capacity, time and cost planning for Cerebras wafer-scale systems and GPU clusters.

``wseplan.serve(model, target, ...)`` (:func:`wseplan.serving.serve`) is loaded on first use, so importing the
package (and starting the CLI) stays light.
"""

__version__ = "0.1.0"
__all__ = ["__version__", "serve"]


def __getattr__(name: str):
    if name == "serve":  # lazy: wseplan.serving pulls in numpy, the catalogs and the planning chain
        from .serving import serve

        return serve
    raise AttributeError(f"module 'wseplan' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"serve"})
