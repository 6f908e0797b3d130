"""Anthropic's Messages API as a dialect of the chat layer (api/README.md): bodies, the request
translated, the deltas as content-block events, errors in Anthropic's shape."""
