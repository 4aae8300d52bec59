// Rendering helpers for the hale dashboard: a virtualised list, formatting,
// and the small panels (roles, relay, services, member detail, chart).
// Pure functions of the data they are given; app.js decides when to call them.

/** Escapes text for HTML. */
export function esc(v) {
  return String(v ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

/** A duration in ms, short: 840 ms, 1.2 s, 3m 05s, 2h 10m. */
export function fmtMs(ms) {
  if (ms == null || Number.isNaN(ms)) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
}

/** Bytes, short: 0 B, 12.3 KiB, 64.0 MiB. */
export function fmtBytes(n) {
  if (n == null) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${u[i]}`;
}

/** Wall-clock time of a Unix ms timestamp: 14:03:27.412. */
export function fmtTime(unixMs) {
  const d = new Date(unixMs);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** Sets an element's text only when it changed (no needless layout). */
export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/**
 * A virtualised list: only the rows in view (plus a margin) exist in the
 * DOM, reused as the list scrolls. `fill(row, item)` updates one row.
 */
export class VList {
  constructor(root, rowHeight, make, fill, maxRows = 0) {
    Object.assign(this, { root, h: rowHeight, make, fill, maxRows, items: [], pool: [] });
    this.spacer = document.createElement('div');
    this.spacer.className = 'spacer';
    this.empty = document.createElement('div');
    this.empty.className = 'empty';
    root.append(this.spacer, this.empty);
    root.addEventListener('scroll', () => this.draw(), { passive: true });
  }

  setItems(items, emptyText) {
    this.items = items;
    this.spacer.style.height = `${items.length * this.h}px`;
    if (this.maxRows) {
      // As tall as its rows, up to maxRows: a small cluster leaves no blank panel.
      const rows = Math.min(this.maxRows, Math.max(items.length, 3));
      const height = `${rows * this.h + 2}px`;
      if (this.root.style.height !== height) this.root.style.height = height;
    }
    setText(this.empty, items.length ? '' : emptyText);
    this.empty.hidden = items.length > 0;
    this.draw();
  }

  draw() {
    const top = this.root.scrollTop;
    const height = this.root.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / this.h) - 4);
    const last = Math.min(this.items.length, Math.ceil((top + height) / this.h) + 4);
    while (this.pool.length < last - first) {
      const r = this.make();
      r.classList.add('row');
      this.root.append(r);
      this.pool.push(r);
    }
    this.pool.forEach((r, i) => {
      const idx = first + i;
      if (idx < last) {
        r.hidden = false;
        const y = `translateY(${idx * this.h}px)`;
        if (r.style.transform !== y) r.style.transform = y;
        this.fill(r, this.items[idx], idx);
      } else {
        r.hidden = true;
      }
    });
  }
}

/** A state badge. */
export function badge(state, cls = `s-${state}`) {
  return `<span class="badge ${esc(cls)}">${esc(state)}</span>`;
}

/** One line about an event's detail. */
export function eventDetail(e) {
  const d = e.detail || {};
  switch (e.kind) {
    case 'suspected': return `accused by ${d.accuser ?? '?'}`;
    case 'dead': return `declared by ${d.declared_by ?? '?'}; ${d.confirmations ?? 0} confirmation(s); silent ${fmtMs(d.silent_ms_before_verdict)}, suspected ${fmtMs(d.suspected_ms_before_verdict)}`;
    case 'recovered': case 'refuted': return d.was_dead ? 'had been declared dead' : 'was suspected';
    case 'paused': return `the agent was paused for ${fmtMs(d.gap_ms)}`;
    case 'unsupported-wire-version': return `speaks wire ${d.speaks ?? d.version}, this agent ${d.ours}: they cannot hear each other, upgrade the older one`;
    case 'generation-raised': return `restarted behind an earlier run's clock: generation raised from ${d.previous} to ${d.generation}`;
    case 'promoted': return `${d.role} epoch ${d.epoch}${d.hook_ok === false ? ', promote hook FAILED' : ''}`;
    case 'promoting': return `${d.role} epoch ${d.epoch}: granted, promote hook running`;
    case 'demoting': return `${d.role} epoch ${d.epoch}: stepping down (${d.reason ?? ''})`;
    case 'demoted': return `${d.role} epoch ${d.epoch} (${d.reason ?? ''})` +
      (d.promote && d.promote !== 'succeeded' ? `; promote hook ${d.promote}` : '') +
      (d.demote && d.demote !== 'succeeded' ? `; demote ${d.demote}` : '');
    case 'eligible': return `${d.role}: ${d.eligible ? 'eligible' : 'not eligible'}`;
    case 'clock-skew': return d.side === 'server'
      ? `control-plane server ${d.server} refused a member's request stamped ${fmtMs(Math.abs(d.skew_ms))} ${d.skew_ms < 0 ? 'behind' : 'ahead of'} its clock (told it the time)`
      : `this host's clock is ${fmtMs(Math.abs(d.skew_ms))} ${d.skew_ms < 0 ? 'behind' : 'ahead of'} control-plane server ${d.server}'s: stamping in its time; fix NTP`;
    case 'breaker': return `${d.role} upstream ${d.upstream}: ${d.from} → ${d.to}`;
    case 'role-paused': return `${d.role}: ${d.paused ? 'paused (no automatic promotion or demotion)' : 'resumed'}`;
    case 'not-eligible': return `${d.role}: not eligible, its copy ${d.lag} bytes behind (max_lag_on_failover ${d.max_lag})`;
    case 'rejoining': case 'rewound': case 'recloned': case 'streaming': return `${d.role}: ${e.kind} (holder ${d.upstream})`;
    case 'rejoin-failed': return `${d.role}: rejoining ${d.upstream} failed: ${d.error}`;
    case 'postgres-fenced': return `${d.role}: a primary nobody holds was fenced (${d.how})`;
    case 'switchover': return `${d.role}: switchover to ${d.to} ${{ordered: 'ordered', cancelled: 'cancelled', waiting: 'waiting for it to catch up', 'handing-over': 'under way: the holder steps down'}[d.step] ?? d.step}` +
      (d.reason ? ` (${d.reason})` : '');
    case 'config-reloaded': return (d.changes ?? []).length
      ? `configuration reloaded: ${d.changes.map((c) => `${c.key} ${c.change}`).join(', ')}`
      : 'configuration reloaded: nothing changed';
    case 'config-reload-refused': return `configuration reload refused (${d.reason ?? '?'}), nothing changed: ` +
      ((d.keys ?? []).map((k) => k.key || k.problem).join(', ') || d.error || '');
    // A failover always names its new holder: `released` is for holder events.
    case 'holder': case 'failover': return `${d.role}: ${d.from ?? 'none'} → ${d.to ?? 'released'}, epoch ${d.epoch}` +
      (d.duration_ms != null ? `, ${fmtMs(d.duration_ms)} after ${d.from} went silent` : '');
    default: return e.incarnation != null ? `incarnation ${e.incarnation}` : '';
  }
}

/** The roles panel. */
export function rolesHtml(data, fetchedAt, members) {
  if (!data) return '<div class="empty">Loading roles…</div>';
  if (!data.roles.length) {
    return `<div class="empty">${data.control_plane ? 'No roles yet.' : 'This agent has no control plane: no roles configured.'}</div>`;
  }
  const age = Date.now() - fetchedAt;
  return data.roles.map((r) => {
    const left = r.lease_left_ms != null ? Math.max(0, r.lease_left_ms - age) : null;
    const holderState = r.holder ? members.get(r.holder)?.state : null;
    const holder = r.holder
      ? `<b>${esc(r.holder)}</b>${holderState && holderState !== 'alive' ? ` ${badge(holderState)}` : ''}` +
        // Granted but its promote hook still runs (or it is giving the role up).
        (r.holder_state && r.holder_state !== 'holder' ? ` ${badge(r.holder_state, `h-${r.holder_state}`)}` : '')
      : '<span class="bad">no holder</span>';
    const lease = left != null
      ? `<span class="lease" title="lease left"><i style="width:${Math.min(100, left / 20)}%"></i></span> ${fmtMs(left)}`
      : '–';
    let standby = 0;
    const rows = r.candidates.map((c) => {
      const order = c.holder ? 'holder' : `#${++standby}`;
      const ready = c.eligible ? '<span class="ok">ready</span>' : '<span class="bad">not ready</span>';
      const state = members.get(c.node)?.state ?? c.member_state;
      return `<tr data-candidate="${esc(c.node)}"><td>${order}</td><td>${esc(c.node)}</td><td>${esc(c.priority)}</td><td>${badge(state)}</td><td>${ready}</td></tr>`;
    }).join('');
    return `<div class="role" data-role="${esc(r.role)}" data-holder="${esc(r.holder ?? '')}" data-epoch="${r.epoch}">
      <div class="role-head"><span class="name">${esc(r.role)}</span><span>holder ${holder}</span>
      <span>epoch <b class="epoch">${esc(r.epoch)}</b></span><span>lease ${lease}</span>
      ${r.paused ? `<span class="bad" title="hale roles resume ${esc(r.role)}">PAUSED: no automatic promotion or demotion</span>` : ''}
      ${r.switchover ? `<span class="warn" title="hale roles switchover ${esc(r.role)} --cancel">switchover to ${esc(r.switchover.to)} ordered${r.switchover.at_unix_ms ? ` for ${fmtTime(r.switchover.at_unix_ms)}` : ''}</span>` : ''}
      ${r.held_since_unix_ms ? `<span class="muted">since ${fmtTime(r.held_since_unix_ms)}</span>` : ''}</div>
      <table class="t"><thead><tr><th>order</th><th>candidate</th><th>priority</th><th>member</th><th>readiness</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="5" class="muted">no candidates known</td></tr>'}</tbody></table></div>`;
  }).join('');
}

/** The relay panel. */
export function relayHtml(r) {
  if (r === undefined) return '<div class="empty">Loading…</div>';
  if (r === null) return '<div class="empty">No relay configured on this agent.</div>';
  const pct = r.queue_cap ? Math.min(100, (100 * r.queue_bytes) / r.queue_cap) : 0;
  const ups = r.upstreams.map((u) =>
    `<tr data-upstream="${esc(u.role)}"><td>${esc(u.role)}</td><td>${esc(u.target)}</td><td>${esc(u.member ?? '–')}</td><td>${badge(u.breaker, `b-${u.breaker}`)}</td></tr>`).join('');
  const drops = Object.entries(r.dropped).map(([k, v]) =>
    `<tr><td>${esc(k)}</td><td class="${v ? 'bad' : 'muted'}">${v}</td></tr>`).join('');
  return `<table class="kv">
    <tr><th>queue</th><td><span class="bar"><i style="width:${pct}%"></i></span> ${fmtBytes(r.queue_bytes)} of ${fmtBytes(r.queue_cap)}</td></tr>
    <tr><th>spool</th><td>${r.spool ? fmtBytes(r.spool_bytes) : 'none configured'}</td></tr>
    <tr><th>events</th><td>${r.accepted} accepted, ${r.forwarded} forwarded, ${r.spooled} spooled, ${r.in_flight} in flight, ${r.failovers} failover(s)</td></tr>
    </table>
    <table class="t"><thead><tr><th>upstream</th><th>target</th><th>member</th><th>breaker</th></tr></thead><tbody>${ups}</tbody></table>
    <table class="t"><thead><tr><th>dropped, by reason</th><th>${r.dropped_total} in all</th></tr></thead><tbody>${drops}</tbody></table>`;
}

function checksHtml(checks) {
  return checks.map((c) => {
    const runs = c.recent.slice(-12).map((x) =>
      `<i class="${x.ok ? '' : 'f'}" title="${esc(`${x.ok ? 'ok' : 'FAILED'}: ${x.detail} (${x.took_ms} ms)`)}"></i>`).join('');
    return `<div>${esc(c.name)} <span class="muted">${c.ready ? 'readiness' : 'liveness'} · ${esc(c.runs)} runs, ${esc(c.failures)} failed</span> <span class="runs">${runs}</span></div>`;
  }).join('');
}

/** Services and checks of one or more nodes. */
export function servicesHtml(data, onlyNode, members) {
  if (!data) return '<div class="empty">Loading services…</div>';
  const nodes = data.nodes.filter((n) => !onlyNode || n.node === onlyNode);
  if (!nodes.length) return '<div class="empty">No live members.</div>';
  return nodes.map((n) => {
    let body;
    if (n.error) body = `<div class="muted">${esc(n.error)}</div>`;
    else if (!n.services?.length) body = '<div class="muted">no services configured</div>';
    else {
      body = `<table class="t"><thead><tr><th>service</th><th></th><th>live</th><th>ready</th><th>checks (recent, newest right)</th></tr></thead><tbody>${
        n.services.map((s) => `<tr data-service="${esc(s.name)}"><td>${esc(s.name)}</td>
          <td>${s.essential ? '<span class="ess">essential</span>' : '<span class="ness">non-essential</span>'}</td>
          <td>${s.healthy ? '<span class="ok">healthy</span>' : `<span class="bad">failing ${fmtMs(s.failing_for_ms)}</span>`}</td>
          <td>${s.ready ? '<span class="ok">ready</span>' : '<span class="bad">not ready</span>'}</td>
          <td>${checksHtml(s.checks)}</td></tr>`).join('')}</tbody></table>`;
    }
    const state = members?.get(n.node)?.state ?? n.state;
    return `<div class="node-services" data-node="${esc(n.node)}"><h3>${esc(n.node)} ${badge(state)}</h3>${body}</div>`;
  }).join('');
}

/** The selected member: every field, and the evidence behind a death verdict. */
export function memberDetailHtml(m, now, events) {
  const meta = m.meta ? esc(m.meta) : '<span class="muted">none</span>';
  const ev = m.evidence;
  const evidence = ev ? `<div class="evidence" data-evidence="${esc(m.name)}"><h3>Why ${esc(m.name)} was declared dead</h3>
    <table class="kv">
      <tr><th>declared by</th><td>${esc(ev.declared_by)}</td></tr>
      <tr><th>suspected by</th><td>${esc(ev.accusers.join(', ') || '–')}</td></tr>
      <tr><th>confirmations</th><td>${ev.confirmations} independent, healthy (${ev.discounted} accuser(s) discounted)</td></tr>
      <tr><th>silent before verdict</th><td>${fmtMs(ev.silent_ms_before_verdict)}</td></tr>
      <tr><th>suspected before verdict</th><td>${fmtMs(ev.suspected_ms_before_verdict)}</td></tr>
      <tr><th>verdict at</th><td>${fmtTime(ev.declared_at_unix_ms)}</td></tr>
    </table></div>` : '';
  const recent = events.slice(-8).reverse().map((e) =>
    `<tr><td>${fmtTime(e.unix_ms)}</td><td class="k-${esc(e.kind)}">${esc(e.kind)}</td><td>${esc(eventDetail(e))}</td></tr>`).join('');
  return `<h3>${esc(m.name)} ${badge(m.state)}</h3>
    <table class="kv">
      <tr><th>address</th><td>${esc(m.addr)}</td></tr>
      <tr><th>incarnation</th><td>${m.incarnation}</td></tr>
      <tr><th>local health</th><td>${m.health}${m.health ? ' (degraded: it is slow to answer)' : ' (healthy)'}</td></tr>
      <tr><th>last heard</th><td>${m.is_self ? 'this agent' : fmtMs(m.last_heard_ms_ago)}</td></tr>
      <tr><th>in this state for</th><td>${fmtMs(m.state_for_ms + (now - m.fetchedAt))}</td></tr>
      <tr><th>metadata</th><td>${meta}</td></tr>
    </table>${evidence}
    ${recent ? `<table class="t"><thead><tr><th>time</th><th>event</th><th>detail</th></tr></thead><tbody>${recent}</tbody></table>` : ''}
    <div class="member-services"></div>`;
}

function median(xs) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** An inline SVG chart of detection and failover durations over time. */
export function chartHtml(detections, failovers) {
  const all = [...detections, ...failovers];
  if (!all.length) return '<div class="empty">No deaths or failovers yet.</div>';
  const W = 400, H = 200, L = 44, B = 18, T = 8, R = 8;
  const t0 = Math.min(...all.map((p) => p.at));
  const t1 = Math.max(...all.map((p) => p.at), t0 + 1000);
  const top = Math.max(...all.map((p) => p.ms), 100);
  const step = 10 ** Math.floor(Math.log10(top));
  const ymax = Math.ceil(top / step) * step;
  const x = (at) => L + ((W - L - R) * (at - t0)) / (t1 - t0);
  const y = (ms) => H - B - ((H - B - T) * ms) / ymax;
  const grid = [0, ymax / 2, ymax].map((v) =>
    `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#dfe2e6"/><text x="${L - 4}" y="${y(v) + 4}" text-anchor="end" font-size="10" fill="#6b7480">${fmtMs(v)}</text>`).join('');
  const dots = (pts, cls) => pts.map((p) =>
    `<circle class="${cls}" cx="${x(p.at).toFixed(1)}" cy="${y(p.ms).toFixed(1)}" r="4"><title>${esc(`${p.label}: ${fmtMs(p.ms)} at ${fmtTime(p.at)}`)}</title></circle>`).join('');
  const axis = `<text x="${L}" y="${H - 4}" font-size="10" fill="#6b7480">${fmtTime(t0).slice(0, 8)}</text><text x="${W - R}" y="${H - 4}" text-anchor="end" font-size="10" fill="#6b7480">${fmtTime(t1).slice(0, 8)}</text>`;
  const sum = (pts, name, cls) => pts.length
    ? `<span><svg width="10" height="10"><circle class="${cls}" cx="5" cy="5" r="4"/></svg> ${name}: <b>${pts.length}</b>, median <b>${fmtMs(median(pts.map((p) => p.ms)))}</b>, max ${fmtMs(Math.max(...pts.map((p) => p.ms)))}</span>`
    : `<span>${name}: none yet</span>`;
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="durations">${grid}${axis}${dots(detections, 'dot-det')}${dots(failovers, 'dot-fo')}</svg>
    <div class="legend">${sum(detections, 'detection', 'dot-det')}<br>${sum(failovers, 'failover', 'dot-fo')}</div>`;
}
