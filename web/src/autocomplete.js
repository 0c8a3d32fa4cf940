// Suggestions under a text input as the user types (arrow keys, Enter, click, Escape).

let nextId = 0;

export function autocomplete(input, fetchNames, onPick = () => {}) {
  const list = document.createElement('ul');
  list.className = 'suggestions';
  list.id = `suggestions-${nextId++}`;
  list.setAttribute('role', 'listbox');
  list.hidden = true;
  input.setAttribute('role', 'combobox');
  input.setAttribute('aria-autocomplete', 'list');
  input.setAttribute('aria-controls', list.id);
  input.setAttribute('autocomplete', 'off');
  input.after(list);

  let active = -1;
  let timer = 0;
  let asked = 0;

  const items = () => [...list.querySelectorAll('li')];
  const close = () => {
    list.hidden = true;
    active = -1;
    input.setAttribute('aria-expanded', 'false');
  };
  const highlight = (i) => {
    items().forEach((li, j) => li.setAttribute('aria-selected', String(i === j)));
    active = i;
  };
  const pick = (name) => {
    // Pending lookups for what was typed before are moot now.
    clearTimeout(timer);
    asked++;
    input.value = name;
    close();
    input.dispatchEvent(new Event('input', { bubbles: true, composed: true }));
    onPick(name);
  };

  const refresh = async () => {
    const ticket = ++asked;
    let names = [];
    try {
      names = await fetchNames(input.value);
    } catch {
      names = [];
    }
    // A slower earlier answer must not replace a newer one.
    if (ticket !== asked || document.activeElement !== input) return;
    list.replaceChildren(
      ...names.map((name) => {
        const li = document.createElement('li');
        li.textContent = name;
        li.setAttribute('role', 'option');
        li.addEventListener('mousedown', (e) => {
          e.preventDefault();
          pick(name);
        });
        return li;
      }),
    );
    list.hidden = names.length === 0;
    input.setAttribute('aria-expanded', String(!list.hidden));
    active = -1;
  };

  input.addEventListener('input', (e) => {
    if (!e.isTrusted) return; // our own notification after a pick
    clearTimeout(timer);
    timer = setTimeout(refresh, 120);
  });
  input.addEventListener('focus', () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 0);
  });
  input.addEventListener('blur', () => setTimeout(close, 100));
  input.addEventListener('keydown', (e) => {
    const all = items();
    if (list.hidden || !all.length) return;
    if (e.key === 'ArrowDown') {
      e.preventDefault();
      highlight((active + 1) % all.length);
    } else if (e.key === 'ArrowUp') {
      e.preventDefault();
      highlight((active - 1 + all.length) % all.length);
    } else if (e.key === 'Enter' && active >= 0) {
      e.preventDefault();
      pick(all[active].textContent);
    } else if (e.key === 'Escape') {
      close();
    }
  });
}
