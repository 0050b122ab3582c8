// Shared by the desktop-like apps: a tiny element builder and the app contract read by rlvr_gym_web.desktop.
// Contract: window.app = {name, getState() -> JSON state, api: {tool(args) -> JSON result}, restart?()}; the
// initial state comes from window.__RLVR_TASK__.state (an init script set by the env) or the app's own demo state.
// An app that passes `start` (its whole state and UI state made again from window.__RLVR_TASK__) gets
// app.restart(): the env then starts an episode in the open page instead of loading it again. The restart puts the
// body's children back as they were when registerApp ran, so such an app calls it from the body's last script, and
// its static elements carry their own data-bid (ids that observe.js numbers would survive the restart).
'use strict';
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'checked' || key === 'value' || key === 'selected' || key === 'disabled') el[key] = value;
    else el.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}
function initialState(demo) {
  const task = window.__RLVR_TASK__;
  return JSON.parse(JSON.stringify(task && task.state ? task.state : demo));
}
function fail(message) { throw new Error(message); }
function registerApp(name, getState, api, render, start) {
  const wrapped = {};
  for (const [tool, fn] of Object.entries(api)) {
    wrapped[tool] = (args) => { const result = fn(args || {}); render(); return result === undefined ? 'ok' : result; };
  }
  window.app = {name: name, getState: () => JSON.parse(JSON.stringify(getState())), api: wrapped};
  const loaded = [...document.body.childNodes];  // the body as loaded: what a restart puts back, before render()
  if (start) window.app.restart = () => { document.body.replaceChildren(...loaded); start(); render(); };
  render();
}
