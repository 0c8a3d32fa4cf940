// Suggestions under a text input as the user types: arrow keys and Enter or a click pick one,
// Escape closes the list. `suggest(term)` resolves to names. The term is the whole value
// unless `part` narrows it to the piece being typed (the last alternative of `web01|we`) and
// says how a pick replaces that piece.

const WHOLE = { term: (value) => value, apply: (value, name) => name };
let nextId = 0;

export function autocomplete(input, suggest, part = WHOLE) {
  const list = document.createElement('ul');
  const id = `suggestions-${nextId++}`;
  list.id = id;
  list.className = 'suggestions';
  list.setAttribute('role', 'listbox');
  list.hidden = true;
  input.setAttribute('role', 'combobox');
  input.setAttribute('aria-autocomplete', 'list');
  input.setAttribute('aria-controls', id);
  input.setAttribute('aria-expanded', 'false');
  input.autocomplete = 'off';
  input.after(list);

  let active = -1;
  let timer = 0;
  let asked = 0;

  const close = () => {
    list.hidden = true;
    active = -1;
    input.setAttribute('aria-expanded', 'false');
    input.removeAttribute('aria-activedescendant');
  };
  const highlight = (i) => {
    [...list.children].forEach((li, j) => li.setAttribute('aria-selected', String(i === j)));
    active = i;
    input.setAttribute('aria-activedescendant', `${id}-${i}`);
    list.children[i].scrollIntoView({ block: 'nearest' });
  };
  const pick = (name) => {
    clearTimeout(timer);
    asked++; // answers still on their way are moot now
    input.value = part.apply(input.value, name);
    close();
    // Tell the page's bindings; untrusted, so it does not ask for suggestions again.
    input.dispatchEvent(new Event('input', { bubbles: true }));
  };

  const refresh = async () => {
    const ticket = ++asked;
    let names;
    try {
      names = await suggest(part.term(input.value));
    } catch {
      names = [];
    }
    // A slower earlier answer must not replace a newer one.
    if (ticket !== asked || document.activeElement !== input) return;
    list.replaceChildren(...names.map((name, i) => {
      const li = document.createElement('li');
      li.id = `${id}-${i}`;
      li.textContent = name;
      li.setAttribute('role', 'option');
      li.addEventListener('mousedown', (e) => {
        e.preventDefault(); // keep the focus in the input
        pick(name);
      });
      return li;
    }));
    list.hidden = names.length === 0;
    input.setAttribute('aria-expanded', String(!list.hidden));
    active = -1;
  };
  const later = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  };

  input.addEventListener('input', (e) => e.isTrusted && later(120));
  input.addEventListener('focus', () => later(0));
  input.addEventListener('blur', () => {
    clearTimeout(timer);
    setTimeout(close, 100);
  });
  input.addEventListener('keydown', (e) => {
    const count = list.children.length;
    if (list.hidden || !count) return;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const step = e.key === 'ArrowDown' ? 1 : -1;
      highlight((Math.max(active, 0) + (active < 0 && step > 0 ? 0 : step) + count) % count);
    } else if (e.key === 'Enter' && active >= 0) {
      e.preventDefault(); // a pick, not a submission of the form
      pick(list.children[active].textContent);
    } else if (e.key === 'Enter' || e.key === 'Escape') {
      close();
    }
  });
}
