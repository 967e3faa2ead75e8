/* app.js — the chat page's logic (docs/webui.md): conversations kept in localStorage, replies
 * streamed from POST /v1/chat/completions (SSE) and drawn as Markdown through marked, then
 * DOMPurify; raw HTML in a reply is escaped, so it shows as text. Only public endpoints are
 * used: whatever the page does, any OpenAI client can do. */
(function () {
  'use strict';

  var STORE = 'rocmforge.chats.v1', SETTINGS = 'rocmforge.settings.v1', KEY = 'rocmforge.apikey';
  var $ = function (id) { return document.getElementById(id); };
  var el = {
    app: $('app'), sidebar: $('sidebar'), scrim: $('scrim'), list: $('chat-list'), messages: $('messages'),
    empty: $('empty'), input: $('input'), send: $('send'), stop: $('stop'), composer: $('composer'),
    model: $('model-name'), speed: $('speed'), settings: $('settings'), keybar: $('keybar'),
    keyInput: $('keybar-input'), libNote: $('lib-note')
  };
  var FIELDS = ['system', 'temperature', 'top_p', 'max_tokens', 'seed', 'api_key'];

  // ---- storage (a full or disabled localStorage loses persistence, not the chat) ----
  function load(name, dflt) {
    try { var v = localStorage.getItem(name); return v ? JSON.parse(v) : dflt; } catch (e) { return dflt; }
  }
  function store(name, v) {
    try { localStorage.setItem(name, JSON.stringify(v)); return true; } catch (e) {
      console.warn('rocmforge: cannot save to localStorage:', e); return false;
    }
  }
  var state = load(STORE, null);
  if (!state || !Array.isArray(state.chats)) state = { current: null, chats: [] };
  var settings = Object.assign({ system: '', temperature: '0.7', top_p: '0.95', max_tokens: '', seed: '' },
                               load(SETTINGS, {}));
  var apiKey = load(KEY, '') || '';
  function save() { store(STORE, state); }

  function newId() { return Date.now().toString(36) + Math.random().toString(36).slice(2, 8); }
  function current() {
    var c = state.chats.find(function (x) { return x.id === state.current; });
    if (!c) {
      c = { id: newId(), title: '', updated: Date.now(), messages: [] };
      state.chats.unshift(c);
      state.current = c.id;
    }
    return c;
  }

  // ---- rendering ----
  var markdown = typeof window.marked !== 'undefined' && typeof window.DOMPurify !== 'undefined' &&
                 window.DOMPurify.isSupported;
  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }
  var libNote = '';
  if (markdown) { // a sanitizer that throws must not half-work: plain text then
    try { DOMPurify.sanitize('<p><b>x</b></p>'); } catch (e) {
      markdown = false;
      libNote = 'Replies are shown as plain text: DOMPurify fails on this system (' + e.message + ').';
    }
  }
  if (markdown) {
    // raw HTML in Markdown (block or inline) comes out escaped: a reply's <script> is text
    marked.use({ gfm: true, breaks: false, headerIds: false, mangle: false,
                 renderer: { html: function (html) { return escapeHtml(html); } } });
    DOMPurify.addHook('afterSanitizeAttributes', function (node) {
      if (node.tagName === 'A' && node.hasAttribute('href')) {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer');
      }
    });
  }
  document.body.dataset.markdown = markdown ? 'on' : 'off';
  if (libNote) el.libNote.textContent = libNote;
  else if (!markdown) {
    el.libNote.textContent = 'Replies are shown as plain text: this build lacks ' +
      [typeof window.marked === 'undefined' ? 'marked (libjs-marked)' : '',
       typeof window.DOMPurify === 'undefined' ? 'DOMPurify (node-dompurify)' : ''].filter(Boolean).join(' and ') + '.';
  }

  // highlight.js is large (~270 kB gzipped): fetched only when a reply first holds code
  var hl = { state: 'none' };
  function loadHighlighter() {
    if (hl.state !== 'none') return;
    var meta = document.querySelector('meta[name="rf-hljs"]');
    if (!meta) { hl.state = 'absent'; return; }
    hl.state = 'loading';
    var s = document.createElement('script');
    s.src = meta.getAttribute('content');
    s.async = true;
    s.onload = function () {
      hl.state = window.hljs ? 'ready' : 'absent';
      if (hl.state === 'ready') el.messages.querySelectorAll('.msg.assistant:not(.pending) .body').forEach(highlight);
    };
    s.onerror = function () { hl.state = 'absent'; };
    document.head.appendChild(s);
  }
  function highlight(body) {
    var blocks = body.querySelectorAll('pre code:not(.hljs)');
    if (!blocks.length) return;
    if (hl.state !== 'ready') { loadHighlighter(); return; }
    blocks.forEach(function (b) {
      var m = /(?:^|\s)language-([\w+#.-]+)/.exec(b.className), code = b.textContent, r = null;
      try {
        if (m && hljs.getLanguage(m[1])) r = hljs.highlight(m[1], code, true);
        else if (code.length < 20000) r = hljs.highlightAuto(code);
      } catch (e) { r = null; }
      if (r) b.innerHTML = DOMPurify.sanitize(r.value); // hljs escapes; sanitized all the same
      b.classList.add('hljs');
    });
  }

  function renderBody(body, text, final) {
    if (!markdown) { body.textContent = text; body.classList.add('plain'); return; }
    body.innerHTML = DOMPurify.sanitize(marked.parse(text));
    if (final) highlight(body);
  }

  function copyText(text, button) {
    function done(ok) {
      button.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(function () { button.textContent = 'Copy'; }, 1200);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallback()); });
    } else done(fallback());
    function fallback() { // plain http on a LAN address has no clipboard API
      var t = document.createElement('textarea');
      t.value = text; t.setAttribute('readonly', ''); t.style.position = 'fixed'; t.style.opacity = '0';
      document.body.appendChild(t); t.select();
      var ok = false;
      try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
      document.body.removeChild(t);
      return ok;
    }
  }

  function statusLine(m) {
    var parts = [];
    if (m.stopped) parts.push('stopped');
    if (m.finish === 'length') parts.push('cut at max tokens');
    if (m.stats) {
      if (m.stats.tokens) parts.push(m.stats.tokens + ' tokens');
      if (m.stats.tps) parts.push(m.stats.tps.toFixed(1) + ' tok/s');
      if (m.stats.ttft != null) parts.push('first token ' + m.stats.ttft.toFixed(2) + ' s');
    }
    return parts.join(' \u00b7 ');
  }

  function messageNode(m, index) {
    var node = document.createElement('div');
    node.className = 'msg ' + m.role + (m.pending ? ' pending' : '');
    node.dataset.index = index;
    var who = document.createElement('div');
    who.className = 'who';
    var name = document.createElement('span');
    name.textContent = m.role === 'user' ? 'You' : 'Assistant';
    var tools = document.createElement('span');
    tools.className = 'tools';
    var copy = document.createElement('button');
    copy.type = 'button'; copy.className = 'copy'; copy.textContent = 'Copy';
    copy.addEventListener('click', function () { copyText(m.content, copy); });
    tools.appendChild(copy);
    who.appendChild(name); who.appendChild(tools);
    node.appendChild(who);
    var body = document.createElement('div');
    body.className = 'body';
    if (m.role === 'user') body.textContent = m.content;
    else renderBody(body, m.content, !m.pending);
    node.appendChild(body);
    var status = document.createElement('div');
    status.className = 'status';
    status.textContent = statusLine(m);
    node.appendChild(status);
    if (m.error) {
      var err = document.createElement('div');
      err.className = 'error';
      err.setAttribute('role', 'alert');
      err.textContent = m.error;
      if (index === current().messages.length - 1 && !busy) {
        var retry = document.createElement('button');
        retry.type = 'button'; retry.className = 'retry'; retry.textContent = 'Retry';
        retry.addEventListener('click', regenerate);
        err.appendChild(retry);
      }
      node.appendChild(err);
    }
    if (!m.content && !m.pending && m.role === 'assistant') body.hidden = true;
    return node;
  }

  function nearBottom() {
    var s = el.messages;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }
  function scrollDown() { el.messages.scrollTop = el.messages.scrollHeight; }

  function renderChat() {
    var c = current();
    el.messages.querySelectorAll('.msg').forEach(function (n) { n.remove(); });
    c.messages.forEach(function (m, i) { el.messages.appendChild(messageNode(m, i)); });
    el.empty.hidden = c.messages.length > 0;
    var timed = c.messages.filter(function (m) { return m.stats && m.stats.tps; }).pop();
    el.speed.textContent = timed ? timed.stats.tps.toFixed(1) + ' tok/s' : '';
    scrollDown();
    renderList();
  }

  function renderList() {
    el.list.textContent = '';
    state.chats.forEach(function (c) {
      var li = document.createElement('li');
      if (c.id === state.current) li.className = 'active';
      var open = document.createElement('button');
      open.type = 'button'; open.className = 'open';
      open.textContent = c.title || 'New chat';
      open.title = c.title || '';
      open.addEventListener('click', function () {
        if (busy) return;
        state.current = c.id; save(); renderChat(); closeDrawer();
      });
      var del = document.createElement('button');
      del.type = 'button'; del.className = 'del'; del.textContent = '\u00d7';
      del.setAttribute('aria-label', 'Delete chat');
      del.addEventListener('click', function () {
        if (busy && c.id === state.current) return;
        state.chats = state.chats.filter(function (x) { return x !== c; });
        if (state.current === c.id) state.current = state.chats.length ? state.chats[0].id : null;
        save(); renderChat();
      });
      li.appendChild(open); li.appendChild(del);
      el.list.appendChild(li);
    });
  }

  // ---- talking to the server ----
  var busy = false, controller = null;
  function setBusy(b) {
    busy = b;
    document.body.dataset.busy = b ? '1' : '0';
    el.send.hidden = b; el.stop.hidden = !b;
  }

  function headers() {
    var h = { 'Content-Type': 'application/json' };
    if (apiKey) h.Authorization = 'Bearer ' + apiKey;
    return h;
  }

  // An OpenAI error object (from a status or an SSE event) as one readable line.
  function errorText(status, e) {
    var what = { 401: 'The server needs an API key (set it above)', 413: 'The message is too large',
                 429: 'Too many requests', 503: 'The server is busy or not ready' }[status];
    var msg = e && e.message ? e.message : '';
    var code = e && (e.code || e.type) ? ' [' + (e.code || e.type) + ']' : '';
    var head = status ? 'Error ' + status + code : 'Error' + code;
    if (code.indexOf('context_length') >= 0) what = 'The conversation is longer than the model\'s context';
    return head + ': ' + (what ? what + (msg ? ' \u2014 ' + msg : '') : msg || 'no details');
  }

  function numberSetting(name, parse) {
    var v = String(settings[name] == null ? '' : settings[name]).trim();
    if (v === '') return undefined;
    var n = parse(v);
    return isFinite(n) ? n : undefined;
  }

  function requestBody(c, upto) {
    var msgs = [];
    if (settings.system && settings.system.trim()) msgs.push({ role: 'system', content: settings.system });
    c.messages.slice(0, upto).forEach(function (m) {
      if (m.content) msgs.push({ role: m.role, content: m.content });
    });
    var body = { messages: msgs, stream: true, stream_options: { include_usage: true } };
    if (model) body.model = model;
    var t = numberSetting('temperature', parseFloat), p = numberSetting('top_p', parseFloat);
    var mt = numberSetting('max_tokens', function (v) { return parseInt(v, 10); });
    var seed = numberSetting('seed', function (v) { return parseInt(v, 10); });
    if (t !== undefined) body.temperature = t;
    if (p !== undefined) body.top_p = p;
    if (mt !== undefined && mt > 0) body.max_tokens = mt;
    if (seed !== undefined) body.seed = seed;
    return body;
  }

  // Streams the reply at c.messages[index] (an assistant message) from the messages before it.
  function generate(c, index) {
    var reply = c.messages[index];
    var node = null, body = null, status = null, dirty = false, saved = performance.now();
    function attach() {
      node = el.messages.querySelector('.msg[data-index="' + index + '"]');
      body = node && node.querySelector('.body');
      status = node && node.querySelector('.status');
    }
    function paint() { // at most once a frame, however fast pieces come
      dirty = false;
      if (performance.now() - saved > 1000) { // a reload mid-reply keeps what came, give or take a second
        saved = performance.now();
        save();
      }
      if (state.current !== c.id) return;
      if (!body || !body.isConnected) attach();
      if (!body) return;
      var stick = nearBottom();
      renderBody(body, reply.content, false);
      status.textContent = statusLine(reply);
      if (stick) scrollDown();
    }
    function changed() { if (!dirty) { dirty = true; requestAnimationFrame(paint); } }

    setBusy(true);
    controller = new AbortController();
    var t0 = performance.now(), tFirst = 0, tLast = 0, pieces = 0, usage = null;
    function stats() {
      var n = usage && usage.completion_tokens ? usage.completion_tokens : pieces;
      var s = { tokens: n, ttft: tFirst ? (tFirst - t0) / 1000 : null, tps: 0 };
      // decode speed: tokens after the first over the time after it (the first waits for the prompt)
      if (n > 1 && tLast > tFirst) s.tps = (n - 1) / ((tLast - tFirst) / 1000);
      return s;
    }
    function onEvent(data) {
      if (data === '[DONE]') return;
      var o;
      try { o = JSON.parse(data); } catch (e) { return; }
      if (o.error) { reply.error = errorText(0, o.error); return; }
      if (o.usage) usage = o.usage;
      var ch = o.choices && o.choices[0];
      if (!ch) return;
      if (ch.delta && typeof ch.delta.content === 'string' && ch.delta.content.length) {
        var now = performance.now();
        if (!tFirst) tFirst = now;
        tLast = now;
        pieces++;
        reply.content += ch.delta.content;
        changed();
      }
      if (ch.finish_reason) reply.finish = ch.finish_reason;
    }

    return fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody(c, index)), signal: controller.signal
    }).then(function (res) {
      if (!res.ok) {
        return res.text().then(function (t) {
          var e = null;
          try { e = JSON.parse(t).error; } catch (x) { e = { message: t.slice(0, 300) }; }
          reply.error = errorText(res.status, e);
          if (res.status === 401) showKeybar();
        });
      }
      var reader = res.body.getReader(), dec = new TextDecoder(), buf = '';
      function pump() {
        return reader.read().then(function (r) {
          if (r.done) return;
          buf += dec.decode(r.value, { stream: true });
          var i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            var ev = buf.slice(0, i); buf = buf.slice(i + 2);
            ev.split('\n').forEach(function (line) { // ':' lines are the server's pings
              if (line.lastIndexOf('data:', 0) === 0) onEvent(line.slice(5).trim());
            });
          }
          return pump();
        });
      }
      return pump();
    }).catch(function (e) {
      if (e && e.name === 'AbortError') reply.stopped = true; // the server cancels on hang-up
      else reply.error = 'Error: the connection failed (' + (e && e.message ? e.message : e) + ')';
    }).then(function () {
      reply.pending = false;
      if (pieces || usage) reply.stats = stats();
      c.updated = Date.now();
      controller = null;
      setBusy(false);
      save();
      if (state.current === c.id) renderChat();
    });
  }

  function sendMessage(text) {
    if (busy) return;
    var c = current();
    if (!c.title) c.title = text.replace(/\s+/g, ' ').trim().slice(0, 60);
    c.messages.push({ role: 'user', content: text });
    c.messages.push({ role: 'assistant', content: '', pending: true });
    state.chats = [c].concat(state.chats.filter(function (x) { return x !== c; }));
    save();
    renderChat();
    generate(c, c.messages.length - 1);
  }

  // Drops the last reply (an error, say) and asks again.
  function regenerate() {
    if (busy) return;
    var c = current(), last = c.messages[c.messages.length - 1];
    if (!last || last.role !== 'assistant') return;
    c.messages[c.messages.length - 1] = { role: 'assistant', content: '', pending: true };
    save();
    renderChat();
    generate(c, c.messages.length - 1);
  }

  function showKeybar() { el.keybar.hidden = false; el.keyInput.focus(); }

  // ---- the model's name (and whether the server is up) ----
  var model = '';
  function fetchModel() {
    fetch('/v1/models', { headers: headers() }).then(function (r) { return r.json(); }).then(function (j) {
      var m = j && j.data && j.data[0];
      if (!m) throw new Error('no model');
      model = m.id;
      el.model.textContent = m.id;
      var meta = m.meta || {};
      el.model.title = [meta.arch, meta.ftype, meta.device, m.max_model_len ? 'ctx ' + m.max_model_len : '']
        .filter(Boolean).join(' \u00b7 ');
      if (!m.max_model_len) setTimeout(fetchModel, 2000); // still loading
    }).catch(function () {
      el.model.textContent = 'server not reachable';
      setTimeout(fetchModel, 3000);
    });
  }

  // ---- wiring ----
  function closeDrawer() { el.app.classList.remove('drawer'); el.scrim.hidden = true; }
  $('toggle-sidebar').addEventListener('click', function () {
    var open = !el.app.classList.contains('drawer');
    el.app.classList.toggle('drawer', open);
    el.scrim.hidden = !open;
  });
  el.scrim.addEventListener('click', closeDrawer);
  $('toggle-settings').addEventListener('click', function () {
    el.settings.hidden = !el.settings.hidden;
    this.setAttribute('aria-expanded', String(!el.settings.hidden));
  });
  $('new-chat').addEventListener('click', function () {
    if (busy) return;
    var c = current();
    if (c.messages.length) { state.current = null; current(); }
    save(); renderChat(); closeDrawer(); el.input.focus();
  });
  $('clear-chat').addEventListener('click', function () {
    if (busy) return;
    var c = current();
    c.messages = []; c.title = '';
    save(); renderChat();
  });
  $('clear-all').addEventListener('click', function () {
    if (busy || !confirm('Delete every conversation kept in this browser?')) return;
    state = { current: null, chats: [] };
    save(); renderChat();
  });
  FIELDS.forEach(function (f) {
    var input = $(f);
    input.value = f === 'api_key' ? apiKey : (settings[f] == null ? '' : settings[f]);
    input.addEventListener('input', function () {
      if (f === 'api_key') { apiKey = input.value.trim(); store(KEY, apiKey); return; }
      settings[f] = input.value;
      store(SETTINGS, settings);
    });
  });
  el.keybar.addEventListener('submit', function (e) {
    e.preventDefault();
    apiKey = el.keyInput.value.trim();
    store(KEY, apiKey);
    $('api_key').value = apiKey;
    el.keybar.hidden = true;
    var c = current(), last = c.messages[c.messages.length - 1];
    if (last && last.role === 'assistant' && last.error) regenerate();
  });
  el.composer.addEventListener('submit', function (e) {
    e.preventDefault();
    var text = el.input.value;
    if (!text.trim() || busy) return;
    el.input.value = '';
    grow();
    sendMessage(text);
  });
  el.input.addEventListener('keydown', function (e) {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      el.composer.requestSubmit ? el.composer.requestSubmit() : el.send.click();
    }
  });
  function grow() {
    el.input.style.height = 'auto';
    el.input.style.height = Math.min(el.input.scrollHeight + 2, window.innerHeight * 0.4) + 'px';
  }
  el.input.addEventListener('input', grow);
  el.stop.addEventListener('click', function () { if (controller) controller.abort(); });

  // a reply that was streaming when the page went away cannot resume: keep what came
  state.chats.forEach(function (c) {
    c.messages.forEach(function (m) { if (m.pending) { m.pending = false; m.stopped = true; } });
  });
  setBusy(false);
  renderChat();
  fetchModel();
  el.input.focus();
})();
