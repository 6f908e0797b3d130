// One assistant reply of the playground as it streams in: reasoning (collapsible), content,
// tool calls (name + pretty-printed arguments), the token trace strip and the stats line.
// Loaded before playground.js, which drives it. Model text only ever goes into textContent.
"use strict";

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

class Reply {
  constructor() {
    this.node = el("div", "turn assistant");
    this.node.append(el("div", "role", "assistant"));
    this.reasoning = null;
    this.content = null;
    this.calls = [];
    this.trace = null;
    this.text = { reasoning: "", content: "" };
    this.finish = null;
    this.usage = null;
    document.getElementById("transcript").append(this.node);
  }

  section(name) {
    if (name === "reasoning" && !this.reasoning) {
      const details = el("details", "reasoning");
      details.open = true;
      details.append(el("summary", "", "reasoning"));
      this.reasoning = el("div", "reasoning-text");
      details.append(this.reasoning);
      this.node.insertBefore(details, this.node.children[1] || null);
    }
    if (name === "content" && !this.content) {
      this.content = el("div", "content");
      this.node.insertBefore(this.content, this.callsBox || this.trace || null);
    }
    return name === "reasoning" ? this.reasoning : this.content;
  }

  addText(kind, text) {
    if (!text) return;
    this.text[kind] += text;
    this.section(kind).textContent = this.text[kind].trim();
  }

  addToolCall(delta) {
    if (!this.callsBox) {
      this.callsBox = el("div", "tool-calls");
      this.node.insertBefore(this.callsBox, this.trace || null);
    }
    let call = this.calls[delta.index];
    if (!call) {
      call = { id: delta.id, name: "", arguments: "", node: el("div", "tool-call") };
      call.nameNode = el("span", "tool-name");
      call.argsNode = el("pre", "tool-args");
      call.node.append(call.nameNode, call.argsNode);
      this.callsBox.append(call.node);
      this.calls[delta.index] = call;
    }
    const fn = delta.function || {};
    if (delta.id) call.id = delta.id;
    if (fn.name) call.name += fn.name;
    if (fn.arguments) call.arguments += fn.arguments;
    call.nameNode.textContent = call.name;
    call.argsNode.textContent = pretty(call.arguments);
  }

  addTrace(entries) {
    if (!this.trace) {
      this.trace = el("div", "trace");
      this.trace.setAttribute("aria-label", "token trace");
      this.node.append(this.trace);
    }
    for (const t of entries) {
      const classes = ["tok"];
      if (t.thinking) classes.push("thinking");
      if (t.masked) classes.push("masked");
      if (t.forced) classes.push("forced");
      if (t.ended_thinking) classes.push("ended");
      const span = el("span", classes.join(" "), visible(t.text));
      const notes = [`id ${t.token_id}`, t.thinking ? "thinking" : "answering"];
      if (t.masked) notes.push(`grammar: ${t.num_allowed} ids allowed`);
      if (t.forced) notes.push("forced by the thinking budget");
      if (t.ended_thinking) notes.push("the reasoning gate switched here");
      span.title = notes.join(" · ");
      this.trace.append(span);
    }
  }

  showStats(timing) {
    const stats = el("div", "stats");
    const parts = ["finish: " + (this.finish || "?")];
    if (this.usage) {
      parts.push(`${this.usage.prompt_tokens} prompt + ${this.usage.completion_tokens} ` +
                 "completion tokens");
      const decodeS = (timing.end - timing.first) / 1000;
      const n = this.usage.completion_tokens;
      if (n > 1 && decodeS > 0) parts.push(((n - 1) / decodeS).toFixed(1) + " tok/s");
    }
    if (timing.first !== null) parts.push("TTFT " + Math.round(timing.first - timing.start) + " ms");
    stats.textContent = parts.join(" · ");
    this.node.append(stats);
  }

  showError(message) {
    this.node.append(el("div", "error", message));
  }

  message() {
    const msg = { role: "assistant", content: this.text.content || null };
    const calls = this.calls.filter(Boolean);
    if (calls.length) {
      msg.tool_calls = calls.map((c) => ({ id: c.id, type: "function",
                                           function: { name: c.name, arguments: c.arguments } }));
    }
    return msg;
  }
}

function pretty(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch (err) {
    return args;  // still arriving, or not JSON: shown as written
  }
}

function visible(text) {
  return text.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
}
