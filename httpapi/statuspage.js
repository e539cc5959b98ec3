// The breaker status page of payrouter's admin listener (GET /admin/, served by statuspage.go).
//
// The page itself carries no data. This script asks for the admin token, keeps it in this tab's
// sessionStorage only (never in the URL, a cookie or localStorage), and calls the admin API with
// Authorization: Bearer: GET /admin/breakers every 2 seconds, and POST
// /admin/breakers/{gateway}/{operation}/{force-open|force-close|reset} for the buttons.
//
// Everything the API returns is put into the page with textContent and dataset, never as HTML.
// The elements the browser test reads have stable ids and data attributes:
//   #token, #token-submit, #banner[data-kind=unauthorized|disabled|unreachable|error],
//   #summary[data-not-closed], #updated, #breakers[data-stale],
//   tr[data-breaker="paywell/charge"][data-state][data-forced][data-open-until],
//   button[data-action=force-open|force-close|reset], [data-result][data-ok].
'use strict';

(function () {
  const REFRESH_MS = 2000;
  const TIMEOUT_MS = 5000; // a listener that does not answer in this long counts as unreachable
  const TOKEN_KEY = 'payrouter.admin_token';
  // Each action asks first (a click at 3 a.m. can refuse every charge at a gateway, or let a
  // failing one hold every slot), saying what it does to the breaker named.
  const ACTIONS = [
    { action: 'force-open', label: 'Force open', done: 'Forced open',
      ask: function (n) { return 'Force ' + n + ' open?\n\nEvery call to it is refused, on every instance sharing the state store, until Reset.'; } },
    { action: 'force-close', label: 'Force close', done: 'Forced closed',
      ask: function (n) { return 'Force ' + n + ' closed?\n\nNothing can trip it until Reset: if the gateway fails, every call waits for its timeout and holds a slot.'; } },
    { action: 'reset', label: 'Reset', done: 'Reset',
      ask: function (n) { return 'Reset ' + n + '?\n\nIts counts are cleared and any forcing removed: it runs by its own rules again.'; } },
  ];
  // Each state has its own colour (CSS .state-*) and its own words and symbol, so that it reads
  // the same without colour.
  const STATE_TEXT = { closed: '● CLOSED', open: '■ OPEN', half_open: '◐ HALF-OPEN' };
  const STATE_WORD = { closed: 'closed', open: 'open', half_open: 'half-open' };

  const el = {
    instance: document.getElementById('instance'),
    forget: document.getElementById('forget'),
    banner: document.getElementById('banner'),
    form: document.getElementById('token-form'),
    token: document.getElementById('token'),
    submit: document.getElementById('token-submit'),
    board: document.getElementById('board'),
    summary: document.getElementById('summary'),
    updated: document.getElementById('updated'),
    table: document.getElementById('breakers'),
    rows: document.getElementById('breaker-rows'),
  };

  let timer = 0; // the next scheduled refresh
  let seq = 0; // refreshes started
  let shown = 0; // the refresh whose answer is on screen: an older answer never replaces a newer
  let onScreen = []; // the breakers the table and the summary show now
  let lastGood = null; // Date of the last answer shown
  let skewMs = 0; // the listener's clock minus ours, when they differ by more than 2s
  let memoryToken = ''; // where the token lives when sessionStorage is not available
  const rows = new Map(); // breaker name -> its <tr>
  const results = new Map(); // breaker name -> {ok, text}: the last action's outcome

  // ---- the token -------------------------------------------------------------------------

  function getToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (e) {
      return memoryToken;
    }
  }

  function setToken(token) {
    memoryToken = token;
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch (e) {
      // memoryToken holds it for this page's life
    }
  }

  function clearToken() {
    memoryToken = '';
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) {
      // nothing stored
    }
  }

  function askForToken() {
    el.form.hidden = false;
    el.forget.hidden = true;
    el.submit.disabled = false;
    el.token.value = '';
    el.token.focus();
  }

  el.form.addEventListener('submit', function (ev) {
    ev.preventDefault(); // never let the browser submit: the token would end up in a URL
    const token = el.token.value.trim();
    el.token.value = '';
    if (!token) {
      return;
    }
    if (!/^[\x21-\x7e]+$/.test(token)) {
      showBanner('error', 'That token has characters an HTTP header cannot carry (spaces, accents, control characters). Check auth.admin_token.');
      el.token.focus();
      return;
    }
    setToken(token);
    el.submit.disabled = true;
    hideBanner();
    refresh();
  });

  el.forget.addEventListener('click', function () {
    clearToken();
    clearTimeout(timer);
    seq++; // drop any answer still on its way
    shown = seq;
    lastGood = null;
    rows.clear();
    results.clear();
    el.rows.replaceChildren();
    el.board.hidden = true;
    hideBanner();
    askForToken();
  });

  // ---- talking to the admin API ----------------------------------------------------------

  async function call(method, path) {
    const ctrl = new AbortController();
    const t = setTimeout(function () { ctrl.abort(); }, TIMEOUT_MS);
    try {
      return await fetch(path, {
        method: method,
        headers: { Authorization: 'Bearer ' + getToken(), Accept: 'application/json' },
        cache: 'no-store',
        credentials: 'omit',
        redirect: 'error',
        signal: ctrl.signal,
      });
    } finally {
      clearTimeout(t);
    }
  }

  // problemText is the detail of an application/problem+json answer, or its status line.
  async function problemText(res) {
    try {
      const p = await res.json();
      if (p && typeof p.detail === 'string' && p.detail) {
        return p.detail;
      }
      if (p && typeof p.title === 'string' && p.title) {
        return p.title;
      }
    } catch (e) {
      // not JSON
    }
    return res.statusText || 'no detail';
  }

  function networkError(err) {
    if (err && err.name === 'AbortError') {
      return 'no answer within ' + TIMEOUT_MS / 1000 + ' s';
    }
    return String((err && err.message) || err);
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, REFRESH_MS);
  }

  // refresh asks for every breaker and shows the answer, then schedules the next refresh.
  async function refresh() {
    clearTimeout(timer);
    if (!getToken()) {
      askForToken();
      return;
    }
    const mine = ++seq;
    let res;
    let body;
    try {
      res = await call('GET', 'breakers');
      if (res.ok) {
        body = await res.json().catch(function () { return null; }); // not JSON: said below
      }
    } catch (err) {
      el.submit.disabled = false;
      if (mine < shown) {
        return;
      }
      shown = mine;
      const since = lastGood ? ' Showing the last known state, from ' + isoSeconds(lastGood) + '.' : '';
      showBanner('unreachable', 'Cannot reach the admin listener at ' + location.host + ' (' + networkError(err) + ').' +
        since + ' Retrying every ' + REFRESH_MS / 1000 + ' s.');
      markStale(true);
      schedule();
      return;
    }
    el.submit.disabled = false;
    if (mine < shown) {
      return; // a newer answer is on screen already
    }
    shown = mine;
    if (res.status === 401) {
      clearToken();
      clearTimeout(timer);
      showBanner('unauthorized', 'The admin token was refused (401 Unauthorized): enter it again. ' +
        'It is auth.admin_token of this instance\u2019s configuration.');
      markStale(true);
      askForToken();
      return;
    }
    if (res.status === 403) {
      showBanner('disabled', 'The admin API is disabled on this instance (403 Forbidden): set auth.admin_token ' +
        'in its configuration and restart or reload it. Retrying every ' + REFRESH_MS / 1000 + ' s.');
      markStale(true);
      schedule();
      return;
    }
    if (!res.ok || !body || !Array.isArray(body.breakers)) {
      const why = res.ok ? 'an answer without a breakers list' : res.status + ' ' + await problemText(res);
      showBanner('error', 'GET /admin/breakers answered ' + why + '. Showing the last known state; retrying every ' +
        REFRESH_MS / 1000 + ' s.');
      markStale(true);
      schedule();
      return;
    }
    noteSkew(res);
    lastGood = new Date();
    render(body.breakers);
    hideBanner();
    markStale(false);
    el.form.hidden = true;
    el.forget.hidden = false;
    el.board.hidden = false;
    schedule();
  }

  // noteSkew reads the listener's clock from the Date header, so that countdowns are right when
  // this browser's clock is not. Date has a one-second resolution: small differences are noise.
  function noteSkew(res) {
    const d = Date.parse(res.headers.get('Date') || '');
    if (Number.isNaN(d)) {
      return;
    }
    const skew = d - Date.now();
    skewMs = Math.abs(skew) > 2000 ? skew : 0;
  }

  // ---- the banner, the summary, staleness ------------------------------------------------

  function showBanner(kind, text) {
    el.banner.dataset.kind = kind;
    el.banner.textContent = text;
    el.banner.hidden = false;
  }

  function hideBanner() {
    el.banner.hidden = true;
    el.banner.textContent = '';
    delete el.banner.dataset.kind;
  }

  function markStale(stale) {
    el.table.dataset.stale = String(stale);
    el.summary.dataset.stale = String(stale);
    tick();
  }

  function renderSummary(list) {
    const notClosed = list.filter(function (b) { return b.state !== 'closed'; });
    const forcedClosed = list.filter(function (b) { return b.forced === 'closed'; });
    el.summary.dataset.notClosed = String(notClosed.length);
    let text;
    let level;
    if (list.length === 0) {
      text = 'No breakers: no gateway is configured';
      level = 'warn';
    } else if (notClosed.length === 0) {
      text = 'All ' + list.length + ' breakers closed';
      level = 'ok';
    } else {
      text = notClosed.length + ' of ' + list.length + ' breakers not closed: ' +
        notClosed.map(function (b) { return b.name + ' ' + stateWords(b); }).join(', ');
      level = notClosed.some(function (b) { return b.state === 'open'; }) ? 'bad' : 'warn';
    }
    if (forcedClosed.length > 0) {
      text += ' \u2014 forced closed (not protecting): ' + forcedClosed.map(function (b) { return b.name; }).join(', ');
      if (level === 'ok') {
        level = 'warn';
      }
    }
    el.summary.textContent = text;
    el.summary.dataset.level = level;
    document.title = (notClosed.length > 0 ? '(' + notClosed.length + ' not closed) ' : '') + 'payrouter breakers';
  }

  function stateWords(b) {
    const word = STATE_WORD[b.state] || String(b.state);
    return b.forced ? word + ' (forced ' + b.forced + ')' : word;
  }

  // ---- the table -------------------------------------------------------------------------

  function render(list) {
    const seen = new Set();
    let previousGateway = null;
    list.forEach(function (b, i) {
      const name = String(b.name);
      seen.add(name);
      let tr = rows.get(name);
      if (!tr) {
        tr = makeRow(b);
        rows.set(name, tr);
      }
      // Rows stay put between refreshes unless the order changed: a row moved under the
      // pointer would eat a click.
      if (el.rows.children[i] !== tr) {
        el.rows.insertBefore(tr, el.rows.children[i] || null);
      }
      fillRow(tr, b);
      tr.classList.toggle('first-of-gateway', i > 0 && b.gateway !== previousGateway);
      previousGateway = b.gateway;
    });
    for (const [name, tr] of rows) {
      if (!seen.has(name)) {
        tr.remove();
        rows.delete(name);
      }
    }
    onScreen = list.slice();
    renderSummary(onScreen);
    tick();
  }

  function cell(tag, className) {
    const c = document.createElement(tag);
    if (className) {
      c.className = className;
    }
    return c;
  }

  function makeRow(b) {
    const tr = document.createElement('tr');
    const name = String(b.name);
    tr.dataset.breaker = name;
    tr.dataset.gateway = String(b.gateway);
    tr.dataset.operation = String(b.operation);

    const head = cell('th');
    head.scope = 'row';
    const nameEl = cell('span', 'name mono');
    nameEl.textContent = name;
    const sub = cell('span', 'sub');
    sub.textContent = 'gateway ' + b.gateway + ' \u00b7 operation ' + b.operation;
    head.append(nameEl, sub);

    const stateCell = cell('td', 'state-cell');
    const state = cell('span', 'state');
    const forced = cell('span', 'forced');
    forced.title = 'Held by an operator until Reset, on every instance sharing the state store';
    stateCell.append(state, forced);

    const requests = cell('td', 'num');
    requests.dataset.count = 'requests';
    const failures = cell('td', 'num');
    failures.dataset.count = 'failures';
    const consecutive = cell('td', 'num');
    consecutive.dataset.count = 'consecutive_failures';

    const until = cell('td', 'until');
    const time = cell('time');
    const countdown = cell('span', 'countdown');
    until.append(time, countdown);

    const actions = cell('td', 'actions');
    for (const a of ACTIONS) {
      const button = cell('button');
      button.type = 'button';
      button.dataset.action = a.action;
      button.textContent = a.label;
      button.setAttribute('aria-label', a.label + ' ' + name);
      button.addEventListener('click', function () { act(tr, a); });
      actions.append(button);
    }

    // The last action's outcome, under the buttons: kept across refreshes until the next one.
    const result = cell('div', 'result');
    result.dataset.result = '';
    result.setAttribute('role', 'status');
    actions.append(result);

    tr.append(head, stateCell, requests, failures, consecutive, until, actions);
    tr.cells_ = { state: state, forced: forced, requests: requests, failures: failures, consecutive: consecutive,
      time: time, countdown: countdown, result: result };
    return tr;
  }

  function count(v) {
    return typeof v === 'number' && Number.isFinite(v) ? String(v) : '?';
  }

  function fillRow(tr, b) {
    const c = tr.cells_;
    const state = STATE_TEXT[b.state] ? b.state : 'unknown';
    tr.dataset.state = String(b.state);
    tr.dataset.forced = b.forced ? String(b.forced) : '';
    tr.dataset.openUntil = b.open_until ? String(b.open_until) : '';
    c.state.className = 'state state-' + state;
    c.state.textContent = STATE_TEXT[state] || String(b.state).toUpperCase();
    c.forced.hidden = !b.forced;
    c.forced.textContent = b.forced ? 'FORCED ' + String(b.forced).toUpperCase() : '';
    const counts = b.counts || {};
    c.requests.textContent = count(counts.requests);
    c.failures.textContent = count(counts.failures);
    c.consecutive.textContent = count(counts.consecutive_failures);
    if (b.open_until) {
      c.time.dateTime = String(b.open_until);
      c.time.textContent = isoSeconds(new Date(b.open_until)) || String(b.open_until);
    } else {
      c.time.removeAttribute('datetime');
      c.time.textContent = '';
    }
    showCountdown(tr);
    const r = results.get(tr.dataset.breaker);
    if (r) {
      c.result.textContent = r.text;
      c.result.dataset.ok = r.ok;
    }
  }

  // ---- the buttons -----------------------------------------------------------------------

  function setResult(tr, ok, text) {
    results.set(tr.dataset.breaker, { ok: ok, text: text });
    tr.cells_.result.textContent = text;
    tr.cells_.result.dataset.ok = ok;
  }

  async function act(tr, a) {
    if (!window.confirm(a.ask(tr.dataset.breaker))) {
      setResult(tr, 'warn', a.label + ': cancelled, nothing sent');
      return;
    }
    const buttons = tr.querySelectorAll('button');
    buttons.forEach(function (b) { b.disabled = true; });
    setResult(tr, 'pending', a.label + ': sending\u2026');
    const path = 'breakers/' + encodeURIComponent(tr.dataset.gateway) + '/' +
      encodeURIComponent(tr.dataset.operation) + '/' + a.action;
    try {
      const res = await call('POST', path);
      if (res.ok) {
        const b = await res.json();
        const warning = res.headers.get('Warning');
        let text = '\u2713 ' + a.done + ' at ' + clock(new Date()) + ': now ' + stateWords(b);
        if (warning) {
          const quoted = /"([^"]*)"/.exec(warning);
          text += '. Warning: ' + (quoted ? quoted[1] : warning);
        }
        setResult(tr, warning ? 'warn' : 'true', text);
        if (b && b.name === tr.dataset.breaker) {
          shown = ++seq; // a refresh sent before the change must not show the old state again
          fillRow(tr, b);
          // The summary tells the same as the rows, at once, not one refresh later.
          onScreen = onScreen.map(function (x) { return x.name === b.name ? b : x; });
          renderSummary(onScreen);
        }
      } else if (res.status === 401) {
        setResult(tr, 'false', '\u2717 ' + a.label + ' refused: the admin token is no longer accepted (401)');
      } else {
        setResult(tr, 'false', '\u2717 ' + a.label + ' failed: ' + res.status + ' ' + await problemText(res));
      }
    } catch (err) {
      setResult(tr, 'false', '\u2717 ' + a.label + ' not sent: cannot reach the admin listener (' + networkError(err) + ')');
    } finally {
      buttons.forEach(function (b) { b.disabled = false; });
      refresh(); // show the change, and the 401 banner if that is what happened
    }
  }

  // ---- time ------------------------------------------------------------------------------

  function isoSeconds(d) {
    if (!(d instanceof Date) || Number.isNaN(d.getTime())) {
      return '';
    }
    return d.toISOString().replace(/\.\d+Z$/, 'Z');
  }

  function clock(d) {
    return isoSeconds(d).slice(11);
  }

  function span(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    if (s < 60) {
      return s + 's';
    }
    const m = Math.floor(s / 60);
    if (m < 60) {
      return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
    }
    return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  }

  function showCountdown(tr) {
    const c = tr.cells_;
    const now = Date.now() + skewMs;
    const until = Date.parse(tr.dataset.openUntil || '');
    if (!Number.isNaN(until)) {
      c.countdown.textContent = until > now ? 'in ' + span(until - now) : 'cooldown over: the next call or probe is a trial';
      c.countdown.classList.remove('none');
    } else if (tr.dataset.forced === 'open') {
      c.countdown.textContent = 'until Reset';
      c.countdown.classList.remove('none');
    } else {
      c.countdown.textContent = '\u2014';
      c.countdown.classList.add('none');
    }
  }

  // tick updates what changes with time alone: countdowns and the age of the data.
  function tick() {
    for (const tr of rows.values()) {
      showCountdown(tr);
    }
    if (lastGood) {
      const stale = el.table.dataset.stale === 'true';
      const age = span(Date.now() - lastGood.getTime());
      el.updated.textContent = (stale ? 'STALE: last good answer ' : 'Last updated ') + isoSeconds(lastGood) +
        ' (' + age + ' ago)' + (stale ? '' : ' \u00b7 refreshes every ' + REFRESH_MS / 1000 + ' s');
      el.updated.dataset.stale = String(stale);
      el.updated.dataset.updated = lastGood.toISOString();
    }
  }

  // ---- start -----------------------------------------------------------------------------

  el.instance.textContent = location.host;
  setInterval(tick, 1000);
  document.addEventListener('visibilitychange', function () {
    // Background tabs run timers late: catch up as soon as the tab is looked at again.
    if (!document.hidden && getToken()) {
      refresh();
    }
  });
  if (getToken()) {
    el.form.hidden = true;
    refresh();
  } else {
    askForToken();
  }
}());
