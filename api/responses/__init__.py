"""OpenAI's Responses API as a dialect of the chat layer (api/README.md): the body, items
translated, one turn through the engine, typed events, the stored responses."""
