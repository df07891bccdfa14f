"""One Streamlit script per page; ``grpc_overhead.app.navigation`` lists them."""
