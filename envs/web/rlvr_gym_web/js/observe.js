// Marks every visible element with a stable `data-bid` and renders a compact accessibility-tree-like text.
// Idea from BrowserGym (frame_mark_elements.js + flatten_axtree_to_str): ids already given keep their value,
// new elements get the next integer, so an id seen in one observation still names the same element later.
// Returns {lines: [string], truncated: bool, title: string}.
(maxLines) => {
  if (window.__rlvrNextBid === undefined) window.__rlvrNextBid = 1;
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'META', 'LINK', 'HEAD', 'BR', 'svg']);
  const LEAF = new Set(['button', 'link', 'option', 'textbox', 'checkbox', 'radio', 'slider', 'spinbutton',
    'img', 'menuitem', 'tab', 'switch']);
  const TAG_ROLES = {A: 'link', BUTTON: 'button', TEXTAREA: 'textbox', OPTION: 'option', IMG: 'img',
    H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading', LI: 'listitem',
    UL: 'list', OL: 'list', TABLE: 'table', TR: 'row', TD: 'cell', TH: 'columnheader', LABEL: 'label',
    FORM: 'form', DIALOG: 'dialog', NAV: 'navigation'};
  const INLINE = new Set(['SPAN', 'B', 'I', 'STRONG', 'EM', 'U', 'SMALL', 'CODE', 'SUB', 'SUP', 'MARK', 'FONT', 'BR']);
  const INPUT_ROLES = {button: 'button', submit: 'button', reset: 'button', checkbox: 'checkbox', radio: 'radio',
    range: 'slider', number: 'spinbutton'};
  const clip = (s, n) => { s = (s || '').replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 1) + '…' : s; };
  const quote = (s) => "'" + s.replace(/'/g, "\\'") + "'";
  function roleOf(el) {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit;
    if (el.tagName === 'INPUT') return INPUT_ROLES[(el.type || 'text').toLowerCase()] || 'textbox';
    if (el.tagName === 'SELECT') return el.multiple ? 'listbox' : 'combobox';
    if (el.tagName === 'A') return el.hasAttribute('href') || el.onclick ? 'link' : 'generic';
    return TAG_ROLES[el.tagName] || 'generic';
  }
  function ownText(el) {
    let text = '';
    for (const child of el.childNodes) if (child.nodeType === Node.TEXT_NODE) text += ' ' + child.textContent;
    return clip(text, 100);
  }
  // Text run with only inline, non-interactive children (`Enter <span>Karrie</span> into ...`): one line.
  function textRun(el) {
    if (el.children.length === 0 || !clip(el.textContent, 10)) return false;
    return Array.from(el.querySelectorAll('*')).every((c) => INLINE.has(c.tagName) && !clickable(c) &&
      !c.getAttribute('role'));
  }
  // Handlers added with addEventListener cannot be seen; a pointer cursor is the page's own "clickable" hint.
  function clickable(el) {
    return Boolean(el.onclick || el.hasAttribute('onclick') || el.hasAttribute('tabindex') ||
      (getComputedStyle(el).cursor === 'pointer' && (!el.parentElement || getComputedStyle(el.parentElement).cursor !== 'pointer')));
  }
  function nameOf(el, role) {
    const aria = el.getAttribute('aria-label');
    if (aria) return clip(aria, 100);
    if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT') {
      if (el.labels && el.labels.length) return clip(el.labels[0].innerText, 100);
      if (el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(el.type)) return clip(el.value, 100);
      return clip(el.getAttribute('placeholder') || el.getAttribute('title') || el.name || '', 100);
    }
    if (el.tagName === 'IMG') return clip(el.alt || el.title || '', 100);
    if (LEAF.has(role) || textRun(el)) return clip(el.innerText || el.textContent, 100);
    return ownText(el);
  }
  function hidden(el) {
    if (el.hidden) return true;
    const style = getComputedStyle(el);
    return style.display === 'none' || style.visibility === 'hidden';
  }
  function props(el, role) {
    const out = [];
    if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
      if (role === 'checkbox' || role === 'radio') out.push(el.checked ? 'checked' : 'unchecked');
      else if (role !== 'button') out.push('value=' + quote(clip(el.value, 100)));
    }
    if (el.tagName === 'SELECT') out.push('value=' + quote(clip(el.selectedOptions.length ? el.selectedOptions[0].text : '', 60)));
    if (el.tagName === 'OPTION' && el.selected) out.push('selected');
    if (el.disabled) out.push('disabled');
    if (el === document.activeElement && el !== document.body) out.push('focused');
    const checked = el.getAttribute('aria-checked') || el.getAttribute('aria-selected');
    if (checked === 'true' && role !== 'checkbox') out.push('selected');
    return out;
  }
  const lines = [];
  let truncated = false;
  function visit(el, depth) {
    if (SKIP.has(el.tagName) || hidden(el)) return;
    if (el.dataset.bid === undefined) el.dataset.bid = String(window.__rlvrNextBid++);
    const role = roleOf(el);
    const name = nameOf(el, role);
    const interesting = role !== 'generic' || name || clickable(el) || el.isContentEditable;
    let childDepth = depth;
    if (interesting && el !== document.body) {
      if (lines.length >= maxLines) { truncated = true; return; }
      const shown = role === 'generic' ? (clickable(el) ? 'clickable' : 'text') : role;
      const parts = ['  '.repeat(depth) + '[' + el.dataset.bid + ']', shown];
      if (name) parts.push(quote(name));
      lines.push(parts.concat(props(el, role)).join(' '));
      childDepth = depth + 1;
      if (LEAF.has(role) || textRun(el)) return;
    }
    for (const child of el.children) visit(child, childDepth);
  }
  visit(document.body, 0);
  return {lines: lines, truncated: truncated, title: document.title};
}
