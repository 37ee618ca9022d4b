// The console's shell: hash routes (#/topics/x: relative, so any node serves it), the login
// form, and the refresh loop: the page shown refreshes its own data every few seconds while
// the tab is visible, and not at all while it is hidden.

import { AuthRequired, get, loggedIn, login, logout } from "./api.js";
import { replace } from "./dom.js";
import * as overview from "./overview.js";
import * as topics from "./topics.js";
import * as topic from "./topic.js";
import * as messages from "./messages.js";
import * as groups from "./groups.js";

const view = document.getElementById("view");
const loginSection = document.getElementById("login");
const loginForm = document.getElementById("login-form");
const loginError = document.getElementById("login-error");
const logoutButton = document.getElementById("logout");
const live = document.getElementById("live");

const ctx = { role: "broker", refresh: () => tick() };
let current = null; // { page, refresh, interval }
let timer = null;
let generation = 0;
let busy = false;

function parse(hash) {
  let parts;
  try {
    parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  } catch {
    parts = []; // a malformed link: the overview
  }
  const [first, ...rest] = parts;
  switch (first) {
    case "topics":
      return rest[0] ? { name: "topics", module: topic, params: { topic: rest[0] } } : { name: "topics", module: topics, params: {} };
    case "messages":
      return { name: "messages", module: messages, params: { topic: rest[0] || "", partition: rest[1] || "0" } };
    case "groups":
      return { name: "groups", module: groups, params: { group: rest.length ? rest.join("/") : "" } };
    default:
      return { name: "overview", module: overview, params: {} };
  }
}

async function route() {
  generation += 1;
  clearTimeout(timer);
  const { name, module, params } = parse(location.hash);
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === name);
  }
  replace(view);
  current = module.mount(view, ctx, params);
  await tick();
}

async function tick() {
  clearTimeout(timer);
  if (!current) return;
  if (busy) {
    // a refresh (maybe of the page before) is still out: this page's comes right after it
    timer = setTimeout(tick, 100);
    return;
  }
  const mine = generation;
  if (!document.hidden) {
    busy = true;
    try {
      await current.refresh();
      live.textContent = "live";
      live.classList.remove("stale");
    } catch (error) {
      if (error instanceof AuthRequired) {
        showLogin();
        return;
      }
      live.textContent = "retrying";
      live.classList.add("stale");
    } finally {
      busy = false;
    }
  }
  if (mine === generation && current && current.interval) {
    clearTimeout(timer); // one polling chain, whatever asked meanwhile
    timer = setTimeout(tick, current.interval);
  }
}

function showLogin() {
  clearTimeout(timer);
  current = null;
  replace(view);
  loginSection.hidden = false;
  logoutButton.hidden = true;
  loginForm.elements.user.focus();
}

loginForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  loginError.hidden = true;
  try {
    await login(loginForm.elements.user.value, loginForm.elements.password.value);
  } catch (error) {
    loginError.textContent = error.status === 401 ? "Wrong user or password." : String(error.message);
    loginError.hidden = false;
    return;
  }
  loginForm.reset();
  loginSection.hidden = true;
  logoutButton.hidden = false;
  await route();
});

logoutButton.addEventListener("click", () => {
  logout();
  showLogin();
});

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current) tick();
});
window.addEventListener("hashchange", () => {
  if (loginSection.hidden) route();
});

async function start() {
  try {
    const node = await get("/ui/node.json");
    ctx.role = node.role;
  } catch {
    ctx.role = "broker";
  }
  const badge = document.getElementById("node");
  badge.textContent = ctx.role;
  badge.classList.add(ctx.role);
  logoutButton.hidden = !loggedIn();
  await route();
}

start();

