"""grpc-overhead: where the latency of a gRPC call goes, phase by phase.

The distribution maps one import namespace over the component folders
(see pyproject.toml): instrumentation and prediction service in
``instrumented-service/``, the collector wrapper in ``collector/``, storage and
analysis in ``analyzer/``, the Streamlit app in ``app/``.
"""

__version__ = "0.1.0"
