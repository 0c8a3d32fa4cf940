// The tree browser: OpenTSDB's trees (/api/tree) as nested lists. Opening a branch reads it
// from /api/tree/branch; clicking a leaf hands its metric and tags to `onPick`, which adds
// them to the query as a sub-query.
import * as api from './api.js';

function node(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  n.append(...children);
  return n;
}

const byName = (a, b) => a.displayName.localeCompare(b.displayName, undefined, { sensitivity: 'base' });

// The children of a branch: its branches (each opening on click), then its leaves.
function branchList(branch, onPick, onError) {
  const list = node('ul', { class: 'tree-level', role: 'group' });
  for (const child of [...(branch.branches || [])].sort(byName)) {
    const toggle = node('button', { type: 'button', class: 'tree-branch', 'aria-expanded': 'false', 'data-branch': child.branchId }, child.displayName);
    const item = node('li', { role: 'treeitem' }, toggle);
    toggle.addEventListener('click', async () => {
      const open = toggle.getAttribute('aria-expanded') === 'true';
      item.querySelector(':scope > ul')?.remove();
      toggle.setAttribute('aria-expanded', String(!open));
      if (open) return;
      try {
        item.append(branchList(await api.branch({ branch: child.branchId }), onPick, onError));
      } catch (e) {
        toggle.setAttribute('aria-expanded', 'false');
        onError(e);
      }
    });
    list.append(item);
  }
  for (const leaf of [...(branch.leaves || [])].sort(byName)) {
    const tags = Object.entries(leaf.tags || {}).map(([k, v]) => `${k}=${v}`).join(',');
    const pick = node('button', {
      type: 'button', class: 'tree-leaf', 'data-tsuid': leaf.tsuid,
      title: `${leaf.metric}{${tags}}: add to the query`,
    }, leaf.displayName);
    pick.addEventListener('click', () => onPick(leaf.metric, leaf.tags || {}));
    list.append(node('li', { role: 'treeitem' }, pick));
  }
  if (!list.children.length) list.append(node('li', { class: 'muted' }, 'empty'));
  return list;
}

// Fills `panel` (a <details>) when it is first opened: a choice of tree, then its root.
export function setupTrees(panel, onPick, onError) {
  const choice = panel.querySelector('#tree-choice');
  const view = panel.querySelector('#tree-view');
  const showRoot = async () => {
    view.replaceChildren();
    if (!choice.value) return;
    try {
      view.append(branchList(await api.branch({ treeid: choice.value }), onPick, onError));
    } catch (e) {
      view.append(node('p', { class: 'muted' }, e.status === 404 ? 'This tree has no branches yet.' : e.message));
    }
  };
  let loaded = false;
  panel.addEventListener('toggle', async () => {
    if (!panel.open || loaded) return;
    loaded = true;
    try {
      const trees = await api.trees();
      choice.replaceChildren(...trees.map((t) => node('option', { value: String(t.treeId) }, t.name || `Tree ${t.treeId}`)));
      if (!trees.length) view.replaceChildren(node('p', { class: 'muted' }, 'No trees are defined (see /api/tree).'));
      else await showRoot();
    } catch (e) {
      loaded = false;
      onError(e);
    }
  });
  choice.addEventListener('change', showRoot);
}
