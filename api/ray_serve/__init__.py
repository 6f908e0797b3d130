"""`thinkgate serve --replicas N` on Ray Serve (deployment.py, metrics.py). The public names
(README: `build_app`, `serve run thinkgate.api.ray_serve:app_builder`) are read from here."""

from thinkgate.api.ray_serve.deployment import app_builder, build_app, serve_replicated

__all__ = ["app_builder", "build_app", "serve_replicated"]
