"""One-off evidence scripts: each measures one question of the evidence from evaluation rows or datasets, without
being part of the library (research/README.md). The packages active_rag, langchain_active_rag and
llamaindex_active_rag never import them; the tests import them as ``research.<script>`` from the repository root."""
