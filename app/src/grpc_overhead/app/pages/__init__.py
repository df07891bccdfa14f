"""One Streamlit script per page; ``grpc_overhead.app.main`` lists them in the navigation."""
