// hale dashboard: live view of one agent's cluster, over its HTTP API.
//
// Data flow: an initial load (members, roles, relay, services, event history),
// then the event stream (/v1/events/stream, read with fetch so every event
// kind arrives and reconnects are ours to pace). Each event patches the state
// it is about at once; lists are re-fetched, debounced, to stay exact. All
// DOM writes happen in one requestAnimationFrame per frame, and long lists
// are virtualised, so 1,000 members cost what fits on screen.
import {
  VList, esc, fmtMs, fmtTime, setText, badge, eventDetail,
  rolesHtml, relayHtml, servicesHtml, memberDetailHtml, chartHtml,
} from './views.js';

const $ = (id) => document.getElementById(id);
const ROW = 24;
const MEMBERSHIP = { joined: 'alive', recovered: 'alive', suspected: 'suspect', dead: 'dead', left: 'left' };
const RANK = { suspect: 0, dead: 1, alive: 3, left: 4 };
const MAX_EVENTS = 5000;
const collator = new Intl.Collator(undefined, { numeric: true });

/** Everything the page knows; exposed as window.__hale for tests and benchmarks. */
const S = {
  node: null, members: new Map(), roles: null, rolesAt: 0, relay: undefined, services: null,
  events: [], keys: new Set(), lastSeq: 0, kinds: new Set(), failovers: [], holders: new Map(),
  stateFilter: '', query: '', kindFilter: '', eventQuery: '', selected: null,
  lastOk: 0, down: false, downSince: 0, retryAt: 0, backoff: 500, failures: 0,
  dirty: new Set(), pendingApplied: [], stream: null, loaded: { members: false, roles: false },
  detections: [], pendingFailovers: [], failoverKeys: new Set(),
};
window.__hale = S;
window.__haleApplied = [];

// ---------------------------------------------------------------- fetching

async function api(path, timeout = 2500) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), timeout);
  try {
    const r = await fetch(path, { signal: ctl.signal, cache: 'no-store' });
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    const v = await r.json();
    S.lastOk = Date.now();
    return v;
  } finally {
    clearTimeout(t);
  }
}

function hay(m) {
  return `${m.name} ${m.addr} ${m.meta}`.toLowerCase();
}

async function loadMembers() {
  const started = Date.now();
  const list = await api('/v1/members');
  const now = Date.now();
  const seen = new Set();
  for (const v of list) {
    seen.add(v.name);
    const m = S.members.get(v.name);
    // An event applied while this list was in flight is newer: keep it (a refresh follows).
    if (m && m.patchedAt >= started) continue;
    if (!m) {
      S.members.set(v.name, { ...v, fetchedAt: now, _v: 1, _hay: hay(v) });
      continue;
    }
    const changed = m.state !== v.state || m.incarnation !== v.incarnation || m.health !== v.health ||
      m.meta !== v.meta || m.addr !== v.addr || (m.evidence == null) !== (v.evidence == null);
    Object.assign(m, v, { fetchedAt: now, _hay: changed ? hay(v) : m._hay });
    m._v++;
  }
  for (const [name, m] of [...S.members]) {
    if (!seen.has(name) && !(m.patchedAt >= started)) S.members.delete(name);
  }
  S.loaded.members = true;
  mark('list', 'detail', 'counts');
}

async function loadRoles() {
  try {
    const data = await api('/v1/cluster/roles');
    noteHolders(data);
    S.roles = data;
    S.rolesAt = Date.now();
  } catch (e) {
    if (!S.roles) S.roles = { control_plane: false, roles: [], error: String(e) };
    throw e;
  } finally {
    S.loaded.roles = true;
    mark('roles');
  }
}

async function loadRelay() { S.relay = await api('/v1/relay'); mark('relay'); }
async function loadServices() {
  S.services = await api('/v1/cluster/services', 4000);
  mark('services', 'detail');
}
async function loadHealth() {
  const h = await api('/v1/health', 1500);
  S.node = h.node;
  S.cluster = h.cluster ?? null;
  mark('header');
}

/**
 * When a holder that lost its role at `at` (unix ms) had gone silent: from
 * its death verdict's evidence, else from its member record if it is no
 * longer alive; only silence that began by `at` counts (a holder handed
 * over alive and failing later is no failover). Null if unknown yet.
 */
function silentSince(name, at) {
  const starts = S.events
    .filter((e) => e.kind === 'dead' && e.member === name && e.unix_ms > at - 300000 &&
      e.detail?.silent_ms_before_verdict != null)
    .map((e) => e.unix_ms - e.detail.silent_ms_before_verdict)
    .filter((t) => t <= at);
  if (starts.length) return Math.max(...starts);
  const m = S.members.get(name);
  if (m && m.state !== 'alive' && m.last_heard_ms_ago != null) {
    const t = m.fetchedAt - m.last_heard_ms_ago;
    if (t <= at) return t;
  }
  return null;
}

/** Records a failover's duration (holder silent -> next holder promoted) once both ends are known. */
function resolveFailovers() {
  S.pendingFailovers = S.pendingFailovers.filter((f) => {
    const from = silentSince(f.detail.from, f.at);
    // Keep waiting a while (counted from when the page learned of it, so
    // that history read at load time still finds its verdict).
    if (from == null) return Date.now() - f.seen < 120000;
    f.detail.duration_ms = Math.max(0, f.at - from);
    S.failovers.push({ at: f.at, ms: f.detail.duration_ms, label: `failover of ${f.detail.role} to ${f.detail.to}` });
    mark('chart', 'timeline');
    return false;
  });
}

/**
 * A role changed hands (from `from` to `to` at `epoch`): once per role and
 * epoch, whether the agent's `holder` event or a poll saw it first, it goes
 * on the chart (timed from when `from` went silent).
 */
function noteChange(at, detail) {
  const key = `${detail.role}:${detail.epoch}`;
  if (S.failoverKeys.has(key)) return false;
  S.failoverKeys.add(key);
  S.pendingFailovers.push({ at, detail, seen: Date.now() });
  resolveFailovers();
  return true;
}

/** Notices a role changing holder between polls: a failover, on the timeline and the chart. */
function noteHolders(data) {
  for (const r of data.roles) {
    const prev = S.holders.get(r.role);
    if (!r.holder) continue; // Lapsed: wait for the next holder.
    if (prev && prev.holder !== r.holder && r.epoch > prev.epoch && !S.failoverKeys.has(`${r.role}:${r.epoch}`)) {
      const at = r.held_since_unix_ms ?? Date.now();
      const e = {
        seq: null, unix_ms: at, observer: S.node ?? '', kind: 'failover', member: r.holder,
        detail: { role: r.role, from: prev.holder, to: r.holder, epoch: r.epoch, duration_ms: null },
      };
      addEvent(e, false);
      noteChange(at, e.detail);
    }
    const known = S.holders.get(r.role);
    if (!known || r.epoch >= known.epoch) S.holders.set(r.role, { holder: r.holder, epoch: r.epoch });
  }
}

// ---------------------------------------------------------------- events

function addEvent(e, live) {
  const key = e.seq == null ? `x${e.kind}:${e.member}:${e.unix_ms}` : `${e.seq}:${e.unix_ms}:${e.kind}`;
  if (S.keys.has(key)) return;
  S.keys.add(key);
  if (e.seq != null) S.lastSeq = Math.max(S.lastSeq, e.seq);
  if (S.events.length && e.unix_ms < S.events[S.events.length - 1].unix_ms) {
    const i = S.events.findIndex((x) => x.unix_ms > e.unix_ms);
    S.events.splice(i, 0, e);
  } else {
    S.events.push(e);
  }
  if (S.events.length > MAX_EVENTS) {
    for (const old of S.events.splice(0, 1000)) S.keys.delete(old.seq == null ? '' : `${old.seq}:${old.unix_ms}:${old.kind}`);
  }
  if (!S.kinds.has(e.kind)) { S.kinds.add(e.kind); mark('kinds'); }
  if (e.kind === 'holder' && e.detail) {
    // A control-plane server's record of a role changing hands (history
    // included, so a page opened after a failover still shows it).
    const d = e.detail;
    if (d.to && d.from && d.from !== d.to) noteChange(e.unix_ms, d);
    const known = S.holders.get(d.role);
    if (d.to && (!known || d.epoch > known.epoch)) S.holders.set(d.role, { holder: d.to, epoch: d.epoch });
    mark('chart');
  }
  if (e.kind === 'dead' && e.detail) {
    const ms = e.detail.silent_ms_before_verdict ?? e.detail.suspected_ms_before_verdict;
    if (ms != null) S.detections.push({ at: e.unix_ms, ms, label: `${e.member} declared dead` });
    if (S.pendingFailovers.length) resolveFailovers();
    mark('chart');
  }
  mark('timeline');
  if (live) {
    apply(e);
    S.pendingApplied.push(e);
  }
}

/** Applies a live event to what it is about, at once; exact lists follow, debounced. */
function apply(e) {
  const state = MEMBERSHIP[e.kind];
  if (state && e.member) {
    let m = S.members.get(e.member);
    if (!m) {
      m = { name: e.member, addr: '', state, incarnation: 0, health: 0, last_heard_ms_ago: null,
        state_for_ms: 0, meta: '', is_self: false, evidence: null, _v: 0 };
      m._hay = hay(m);
      S.members.set(e.member, m);
    }
    m.state = state;
    if (e.incarnation != null) m.incarnation = e.incarnation;
    m.state_for_ms = 0;
    m.fetchedAt = Date.now();
    m.patchedAt = m.fetchedAt;
    if (state === 'dead') m.evidence = e.detail;
    else if (state === 'alive') m.evidence = null;
    m._v++;
    mark('list', 'counts', 'detail');
    // Other panels show member states too: redraw them only when it is one of theirs.
    if (S.services?.nodes.some((n) => n.node === e.member)) mark('services');
    if (S.roles?.roles.some((r) => r.candidates.some((c) => c.node === e.member))) mark('roles');
  }
  if (state || e.kind === 'metadata' || e.kind === 'refuted') later('members', loadMembers, 300);
  if (['promoting', 'promoted', 'demoting', 'demoted', 'dead', 'recovered', 'eligible', 'metadata'].includes(e.kind)) later('roles', loadRoles, 150);
  if (e.kind === 'breaker') later('relay', loadRelay, 50);
}

const timers = {};
/** Runs `f` once after `ms`, however often it is asked for meanwhile. */
function later(name, f, ms) {
  if (timers[name]) return;
  timers[name] = setTimeout(() => { timers[name] = null; f().catch(() => {}); }, ms);
}

function parseSse(block) {
  let data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(5).replace(/^ /, '');
  }
  return data ? JSON.parse(data) : null;
}

/** Adds the events after the last one seen; how many there were. */
async function backfill() {
  const list = await api(`/v1/events?since=${S.lastSeq}`);
  for (const e of list) addEvent(e, false);
  mark('timeline');
  return list.length;
}

/** Reads the event stream until it ends; then the caller reconnects. */
async function stream() {
  const ctl = new AbortController();
  S.stream = ctl;
  const r = await fetch('/v1/events/stream', { signal: ctl.signal, cache: 'no-store' });
  if (!r.ok || !r.body) throw new Error(`stream: HTTP ${r.status}`);
  setConn('live');
  // Backfill what happened while we were away (the stream only has what comes next).
  if (await backfill()) { later('members', loadMembers, 0); later('roles', loadRoles, 0); }
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('stream ended');
    S.lastOk = Date.now();
    buf += value.replace(/\r\n/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const e = parseSse(buf.slice(0, i));
      buf = buf.slice(i + 2);
      if (e && e.seq == null && e.missed != null) {
        // `lagged`: the agent dropped events for this slow stream; fetch them.
        later('history', backfill, 0);
      } else if (e) {
        if (e.seq <= S.lastSeq && !S.keys.has(`${e.seq}:${e.unix_ms}:${e.kind}`)) {
          // A restarted agent counts from 1 again: take its whole history.
          S.lastSeq = 0;
          later('history', backfill, 0);
        }
        addEvent(e, true);
      }
    }
    schedule();
  }
}

// ---------------------------------------------------------------- reachability

function setConn(c) {
  const el = $('conn');
  el.dataset.conn = c;
  setText(el.lastElementChild, c === 'live' ? 'live' : c === 'down' ? 'unreachable' : 'connecting');
}

function wentDown() {
  if (!S.down) { S.down = true; S.downSince = Date.now(); }
  setConn('down');
  S.stream?.abort();
  mark('banner');
}

/** Connects (or reconnects) with backoff; loads everything again once back. */
async function connect() {
  for (;;) {
    try {
      await loadHealth();
      await Promise.allSettled([loadMembers(), loadRoles(), loadRelay()]);
      S.down = false;
      S.backoff = 500;
      S.failures = 0;
      mark('banner');
      later('services', loadServices, 0);
      await stream(); // Returns only by throwing.
    } catch {
      wentDown();
      S.retryAt = Date.now() + S.backoff;
      await new Promise((res) => { S.wake = res; setTimeout(res, S.backoff); });
      S.backoff = Math.min(S.backoff * 2, 8000);
    }
  }
}

/** Once a second: polls what has no events (lease left, relay, checks) and checks the agent answers. */
async function tick() {
  mark('banner', 'header');
  if (S.down) return;
  try {
    await loadHealth();
    S.failures = 0;
  } catch {
    // A frozen agent keeps its sockets open: the stream just goes quiet.
    if (++S.failures >= 2) wentDown();
    return;
  }
  const n = S.members.size;
  const t = Math.floor(Date.now() / 1000);
  const polls = [loadRoles(), loadRelay()];
  if (t % (n > 200 ? 10 : 2) === 0) polls.push(loadMembers());
  if (t % 5 === 0) polls.push(loadServices());
  await Promise.allSettled(polls);
}

// ---------------------------------------------------------------- rendering

function mark(...what) {
  for (const w of what) S.dirty.add(w);
  schedule();
}

let frame = 0;
function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

let memberList;
let eventList;
let visibleMembers = [];

function memberRow() {
  const r = document.createElement('div');
  r.className = 'mrow';
  r.innerHTML = '<span class="name"></span><span class="st"><span class="badge"></span></span><span></span><span></span><span></span><span></span><span></span><span class="meta"></span>';
  return r;
}

/** Metadata in a line: candidacies (role:priority) and the user's part; raw text otherwise. */
function metaSummary(m) {
  if (m._metaFor === m.meta) return m._metaText;
  let text = m.meta;
  try {
    const v = JSON.parse(m.meta);
    if (v && typeof v === 'object' && ('roles' in v || 'http' in v)) {
      const roles = Object.entries(v.roles ?? {}).map(([r, [p, ok]]) => `${r}:${p}${ok ? '' : ' (not ready)'}`);
      text = [roles.join(' '), v.meta].filter(Boolean).join(' · ');
    }
  } catch { /* plain text metadata */ }
  m._metaFor = m.meta;
  m._metaText = text;
  return text;
}

function fillMember(r, m) {
  const now = Date.now();
  if (r._m !== m || r._v !== m._v) {
    r._m = m;
    r._v = m._v;
    r.dataset.member = m.name;
    r.dataset.state = m.state;
    r.classList.toggle('self', m.is_self);
    const c = r.children;
    setText(c[0], m.name);
    const b = c[1].firstChild;
    b.className = `badge s-${m.state}`;
    setText(b, m.state);
    setText(c[2], String(m.incarnation));
    setText(c[3], String(m.health));
    setText(c[6], m.addr);
    setText(c[7], metaSummary(m));
    c[7].title = m.meta;
  }
  r.classList.toggle('selected', S.selected === m.name);
  setText(r.children[4], m.is_self ? '—' : fmtMs(m.last_heard_ms_ago));
  setText(r.children[5], fmtMs(m.state_for_ms + (now - m.fetchedAt)));
}

function eventRow() {
  const r = document.createElement('div');
  r.className = 'erow';
  r.innerHTML = '<span></span><span class="kind"></span><span></span><span></span><span></span>';
  return r;
}

function fillEvent(r, e) {
  if (r._e === e) return;
  r._e = e;
  const c = r.children;
  r.dataset.kind = e.kind;
  setText(c[0], fmtTime(e.unix_ms));
  c[1].className = `kind k-${e.kind}`;
  setText(c[1], e.kind);
  setText(c[2], e.member ?? '(itself)');
  setText(c[3], e.observer);
  const d = eventDetail(e);
  setText(c[4], d);
  c[4].title = d;
}

function sortedMembers() {
  const q = S.query;
  const list = [];
  for (const m of S.members.values()) {
    if (S.stateFilter && m.state !== S.stateFilter) continue;
    if (q && !m._hay.includes(q)) continue;
    list.push(m);
  }
  const rank = (m) => (m.is_self ? 2 : RANK[m.state] ?? 5);
  return list.sort((a, b) => rank(a) - rank(b) || collator.compare(a.name, b.name));
}

function counts() {
  const c = { alive: 0, suspect: 0, dead: 0, left: 0 };
  for (const m of S.members.values()) c[m.state] = (c[m.state] ?? 0) + 1;
  return c;
}

function renderHeader() {
  const where = S.cluster ? `cluster ${S.cluster} · ` : '';
  setText($('node'), S.node ? `${where}agent ${S.node} · ${location.host}` : location.host);
  document.title = S.node ? `hale · ${S.cluster ? `${S.cluster} · ` : ''}${S.node}` : 'hale';
}

function renderCounts() {
  const c = counts();
  $('counts').innerHTML = ['alive', 'suspect', 'dead', 'left'].map((s) => `<span>${badge(s)} <b>${c[s]}</b></span>`).join('');
  setText($('members-count'), `(${S.members.size})`);
  const chips = $('state-filter');
  if (!chips.children.length) {
    for (const s of ['', 'alive', 'suspect', 'dead', 'left']) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'chip';
      b.dataset.state = s;
      b.onclick = () => { S.stateFilter = s; mark('list', 'counts'); };
      chips.append(b);
    }
  }
  for (const b of chips.children) {
    const s = b.dataset.state;
    setText(b, s ? `${s} ${c[s]}` : `all ${S.members.size}`);
    b.setAttribute('aria-pressed', String(S.stateFilter === s));
  }
}

function renderBanner() {
  const b = $('banner');
  document.body.classList.toggle('stale', S.down);
  b.hidden = !S.down;
  if (!S.down) return;
  const age = S.lastOk ? fmtMs(Date.now() - S.lastOk) : 'no data yet';
  const retry = Math.max(0, S.retryAt - Date.now());
  setText($('banner-text'), `No answer since ${S.lastOk ? fmtTime(S.lastOk) : 'page load'}: what you see is ${age} old. Retrying in ${fmtMs(retry)}.`);
}

function renderDetail() {
  const d = $('member-detail');
  const m = S.selected && S.members.get(S.selected);
  d.hidden = !m;
  if (!m) return;
  const events = S.events.filter((e) => e.member === m.name);
  d.innerHTML = memberDetailHtml(m, Date.now(), events);
  const svc = S.services?.nodes.some((n) => n.node === m.name) ? S.services : S.memberServices;
  d.querySelector('.member-services').innerHTML = svc ? servicesHtml(svc, m.name, S.members) : '';
}

function renderTimeline() {
  const q = S.eventQuery;
  const list = [];
  for (let i = S.events.length - 1; i >= 0; i--) {
    const e = S.events[i];
    if (S.kindFilter && e.kind !== S.kindFilter) continue;
    if (q && !`${e.member ?? ''} ${e.observer} ${eventDetail(e)}`.toLowerCase().includes(q)) continue;
    list.push(e);
  }
  eventList.setItems(list, S.events.length ? 'No events match.' : 'No events yet.');
  setText($('events-count'), `(${list.length} of ${S.events.length})`);
}

function render() {
  frame = 0;
  const d = S.dirty;
  S.dirty = new Set();
  if (d.has('header')) renderHeader();
  if (d.has('counts')) renderCounts();
  if (d.has('list')) {
    visibleMembers = sortedMembers();
    memberList.setItems(visibleMembers, S.members.size ? 'No member matches.' : 'Loading members…');
  } else if (d.has('header')) {
    memberList.draw(); // Once a second: "last heard" and "for" columns.
  }
  if (d.has('detail') || (d.has('header') && S.selected)) renderDetail();
  if (d.has('roles') || d.has('header')) {
    $('roles').innerHTML = rolesHtml(S.roles, S.rolesAt, S.members);
    setText($('roles-note'), S.roles?.leader ? `control-plane leader: server ${S.roles.leader}` : '');
  }
  if (d.has('relay')) $('relay').innerHTML = relayHtml(S.relay);
  if (d.has('services')) {
    $('services').innerHTML = servicesHtml(S.services, null, S.members);
    setText($('services-note'), S.services?.truncated ? 'first 64 live members; select a member for its own' : '');
  }
  if (d.has('kinds')) {
    const sel = $('kind-filter');
    for (const k of [...S.kinds].sort()) {
      if (![...sel.options].some((o) => o.value === k)) sel.add(new Option(k, k));
    }
  }
  if (d.has('timeline')) renderTimeline();
  if (d.has('chart')) $('chart').innerHTML = chartHtml(S.detections, S.failovers);
  if (d.has('banner')) renderBanner();
  if (S.pendingApplied.length) {
    const now = Date.now();
    for (const e of S.pendingApplied) window.__haleApplied.push({ seq: e.seq, lag_ms: now - e.unix_ms });
    if (window.__haleApplied.length > 10000) window.__haleApplied.splice(0, 5000);
    S.pendingApplied = [];
  }
  if (window.__haleRendered == null && S.loaded.members && S.loaded.roles) {
    window.__haleRendered = performance.now();
  }
}

// ---------------------------------------------------------------- start

function debounce(f, ms) {
  let t;
  return (...a) => { clearTimeout(t); t = setTimeout(() => f(...a), ms); };
}

function start() {
  memberList = new VList($('members-list'), ROW, memberRow, fillMember, 19);
  eventList = new VList($('events-list'), ROW, eventRow, fillEvent);
  $('members-list').addEventListener('click', (ev) => {
    const row = ev.target.closest('[data-member]');
    if (!row) return;
    S.selected = S.selected === row.dataset.member ? null : row.dataset.member;
    S.memberServices = null;
    if (S.selected && !S.services?.nodes.some((n) => n.node === S.selected)) {
      api(`/v1/cluster/services?nodes=${encodeURIComponent(S.selected)}`)
        .then((v) => { S.memberServices = v; mark('detail'); }).catch(() => {});
    }
    memberList.draw();
    mark('detail');
  });
  $('events-list').addEventListener('click', (ev) => {
    const m = ev.target.closest('.row')?._e?.member;
    if (m && S.members.has(m)) { S.selected = m; memberList.draw(); mark('detail'); }
  });
  $('member-search').addEventListener('input', debounce((ev) => {
    S.query = ev.target.value.trim().toLowerCase();
    memberList.root.scrollTop = 0;
    mark('list');
  }, 80));
  $('event-search').addEventListener('input', debounce((ev) => {
    S.eventQuery = ev.target.value.trim().toLowerCase();
    mark('timeline');
  }, 80));
  $('kind-filter').addEventListener('change', (ev) => { S.kindFilter = ev.target.value; mark('timeline'); });
  $('retry').addEventListener('click', () => { S.backoff = 500; S.wake?.(); });
  mark('header', 'counts', 'list', 'timeline', 'chart', 'roles', 'relay', 'services');
  // History first (so the chart and timeline have the past), then live.
  backfill().catch(() => {}).finally(() => connect());
  setInterval(() => { tick().catch(() => {}); }, 1000);
}

start();
// For tests: render at once, whatever requestAnimationFrame does in a hidden tab.
window.__haleFlush = () => { if (frame) cancelAnimationFrame(frame); render(); };
export { esc };
