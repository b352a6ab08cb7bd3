import { useState } from 'preact/hooks';
import { currentId, remove, rename, select } from '../state/conversations';
import { download, fileName, toJson, toMarkdown } from '../state/exchange';
import type { Hit } from '../state/search';
import { sidebarOpen } from '../state/ui';
import { IconButton } from './IconButton';

/** One conversation in the list: open it, rename it (double-click or the pencil), export it, delete it. */
export function ConversationItem({ hit }: { hit: Hit }) {
  const c = hit.conversation;
  const [editing, setEditing] = useState(false);
  const active = currentId.value === c.id;
  if (editing) {
    return (
      <li class="conv active">
        <input
          class="conv-rename"
          data-testid="rename-input"
          value={c.title}
          ref={(el) => el?.focus()}
          onKeyDown={(e) => {
            if (e.key === 'Enter') {
              void rename(c.id, e.currentTarget.value);
              setEditing(false);
            } else if (e.key === 'Escape') setEditing(false);
          }}
          onBlur={(e) => {
            void rename(c.id, e.currentTarget.value);
            setEditing(false);
          }}
        />
      </li>
    );
  }
  return (
    <li class={`conv ${active ? 'active' : ''}`} data-testid="conversation" data-id={c.id}>
      <button
        type="button"
        class="conv-open"
        aria-current={active ? 'page' : undefined}
        onClick={() => {
          select(c.id);
          sidebarOpen.value = false;
        }}
        onDblClick={() => setEditing(true)}
      >
        <span class="conv-title">{c.title}</span>
        {hit.snippet && <span class="conv-snippet">{hit.snippet}</span>}
      </button>
      <div class="conv-actions">
        <IconButton icon="edit" label="Rename" data-testid="rename" onClick={() => setEditing(true)} />
        <IconButton
          icon="download"
          label="Export as Markdown"
          data-testid="export-md"
          onClick={() => download(fileName(c.title, 'md'), 'text/markdown', toMarkdown(c))}
        />
        <IconButton
          icon="copy"
          label="Export as JSON"
          data-testid="export-json"
          onClick={() => download(fileName(c.title, 'json'), 'application/json', toJson([c]))}
        />
        <IconButton
          icon="trash"
          label="Delete"
          data-testid="delete"
          onClick={() => {
            if (confirm(`Delete "${c.title}"?`)) void remove(c.id);
          }}
        />
      </div>
    </li>
  );
}
