"""Python client for the ragtune HTTP API (`ragtune serve`), with LangChain and LlamaIndex retrievers.

The retrievers live in `ragtune.langchain` and `ragtune.llamaindex` and import their framework lazily, so the
client needs nothing beyond the standard library.
"""

from ragtune.client import Client, Hit, RagtuneError

__all__ = ["Client", "Hit", "RagtuneError", "__version__"]
__version__ = "0.1.0"
