// The thinkgate playground: a chat over this server's /v1/chat/completions (SSE), with the
// request's controls on the side and, when asked, the token trace ("thinkgate": {"trace": true})
// as a strip of coloured tokens under each reply. Plain DOM, no build step, nothing external.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { messages: [], pendingCalls: [], controller: null };

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// ---- setup ----------------------------------------------------------------------------------

async function loadDefaults() {
  try {
    const defaults = await (await fetch("/playground/defaults.json")).json();
    $("tools").value = JSON.stringify(defaults.tools, null, 2);
    $("schema").value = JSON.stringify(defaults.json_schema, null, 2);
  } catch (err) {
    $("tools").value = "[]";
  }
  refreshToolChoice();
  await loadModels();
}

async function loadModels() {
  const status = $("server-status");
  try {
    const resp = await fetch("/v1/models", { headers: headers() });
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.error ? body.error.message : resp.statusText);
    const select = $("model");
    select.replaceChildren(...body.data.map((m) => el("option", "", m.id)));
    status.textContent = "max_model_len " + (body.data[0] ? body.data[0].max_model_len : "?");
  } catch (err) {
    status.textContent = "models: " + err.message;
  }
}

function parseTools() {
  const error = $("tools-error");
  error.textContent = "";
  if (!$("use-tools").checked) return null;
  try {
    const tools = JSON.parse($("tools").value || "[]");
    if (!Array.isArray(tools)) throw new Error("tools must be a JSON list");
    return tools.length ? tools : null;
  } catch (err) {
    error.textContent = err.message;
    throw err;
  }
}

function refreshToolChoice() {
  const select = $("tool-choice");
  const current = select.value || "auto";
  let names = [];
  try {
    names = (JSON.parse($("tools").value || "[]") || [])
      .map((t) => (t.function || t).name).filter(Boolean);
    $("tools-error").textContent = "";
  } catch (err) {
    $("tools-error").textContent = err.message;
  }
  const options = ["auto", "none", "required", ...names.map((n) => "function:" + n)];
  select.replaceChildren(...options.map((o) => {
    const opt = el("option", "", o.startsWith("function:") ? "only " + o.slice(9) : o);
    opt.value = o;
    return opt;
  }));
  select.value = options.includes(current) ? current : "auto";
}

// ---- the request ----------------------------------------------------------------------------

function requestBody() {
  const body = {
    model: $("model").value || undefined,
    messages: state.messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($("temperature").value || 0),
    max_tokens: Number($("max-tokens").value || 256),
    chat_template_kwargs: { enable_thinking: $("enable-thinking").checked },
  };
  const budget = $("thinking-budget").value.trim();
  if (budget !== "") body.thinking_token_budget = Number(budget);
  const effort = $("reasoning-effort").value;
  if (effort !== "") body.reasoning_effort = effort;
  const tools = parseTools();
  if (tools) {
    body.tools = tools;
    const choice = $("tool-choice").value;
    body.tool_choice = choice.startsWith("function:")
      ? { type: "function", function: { name: choice.slice(9) } } : choice;
  }
  const format = $("response-format").value;
  $("schema-error").textContent = "";
  if (format === "json_object") body.response_format = { type: "json_object" };
  if (format === "json_schema") {
    try {
      body.response_format = { type: "json_schema",
        json_schema: { name: "response", schema: JSON.parse($("schema").value) } };
    } catch (err) {
      $("schema-error").textContent = err.message;
      throw err;
    }
  }
  if ($("trace").checked) body.thinkgate = { trace: true };
  return body;
}

// ---- streaming ------------------------------------------------------------------------------

function handleChunk(reply, chunk, timing) {
  if (chunk.error) {
    reply.showError(chunk.error.message);
    return;
  }
  if (chunk.usage) reply.usage = chunk.usage;
  for (const choice of chunk.choices || []) {
    const delta = choice.delta || {};
    const reasoning = delta.reasoning !== undefined ? delta.reasoning : delta.reasoning_content;
    const produced = reasoning || delta.content || delta.tool_calls || choice.thinkgate;
    if (produced && timing.first === null) timing.first = performance.now();
    reply.addText("reasoning", reasoning);
    reply.addText("content", delta.content);
    for (const call of delta.tool_calls || []) reply.addToolCall(call);
    if (choice.thinkgate && choice.thinkgate.trace) reply.addTrace(choice.thinkgate.trace);
    if (choice.finish_reason) reply.finish = choice.finish_reason;
  }
}

async function readEvents(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

function addUserTurn(text, role) {
  const turn = el("div", "turn user");
  turn.append(el("div", "role", role), el("div", "text", text));
  $("transcript").append(turn);
}

async function send(event) {
  if (event) event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || state.controller) return;
  let body;
  const pending = state.pendingCalls[0];
  const message = pending
    ? { role: "tool", tool_call_id: pending.id, content: text }
    : { role: "user", content: text };
  state.messages.push(message);
  try {
    body = requestBody();
  } catch (err) {
    state.messages.pop();
    return;
  }
  if (pending) state.pendingCalls.shift();
  addUserTurn(text, pending ? "tool result · " + pending.name : "user");
  $("prompt").value = "";
  const reply = new Reply();
  const timing = { start: performance.now(), first: null, end: null };
  state.controller = new AbortController();
  setBusy(true);
  try {
    const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
      body: JSON.stringify(body), signal: state.controller.signal });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error(err.error ? err.error.message : `HTTP ${resp.status}`);
    }
    await readEvents(resp, (chunk) => handleChunk(reply, chunk, timing));
    timing.end = performance.now();
    reply.showStats(timing);
    state.messages.push(reply.message());
    state.pendingCalls = reply.calls.filter(Boolean);
  } catch (err) {
    state.messages.pop();
    reply.showError(err.name === "AbortError" ? "stopped" : err.message);
  } finally {
    state.controller = null;
    setBusy(false);
    updatePlaceholder();
    reply.node.scrollIntoView({ block: "end" });
  }
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

function updatePlaceholder() {
  const pending = state.pendingCalls[0];
  $("prompt").placeholder = pending
    ? `The result of ${pending.name} (sent as a tool message)`
    : "Ask something (Enter sends, Shift+Enter is a new line)";
}

function clearChat() {
  if (state.controller) state.controller.abort();
  state.messages = [];
  state.pendingCalls = [];
  $("transcript").replaceChildren();
  updatePlaceholder();
}

$("composer").addEventListener("submit", send);
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) send(e);
});
$("stop").addEventListener("click", () => state.controller && state.controller.abort());
$("clear").addEventListener("click", clearChat);
$("tools").addEventListener("input", refreshToolChoice);
$("api-key").addEventListener("change", loadModels);
loadDefaults();
