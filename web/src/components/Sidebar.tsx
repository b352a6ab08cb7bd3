import { useRef } from 'preact/hooks';
import { conversations, newChat, save } from '../state/conversations';
import { download, parseImport, toJson } from '../state/exchange';
import { search } from '../state/search';
import { banner, searchQuery, sidebarOpen } from '../state/ui';
import { ConversationItem } from './ConversationItem';
import { Icon } from './icons';
import { IconButton } from './IconButton';
import { SearchBox } from './SearchBox';

async function importFile(file: File): Promise<void> {
  try {
    const list = parseImport(await file.text());
    const known = new Set(conversations.value.map((c) => c.id));
    for (const c of list) await save(known.has(c.id) ? { ...c, id: crypto.randomUUID() } : c);
    banner.value = { message: `Imported ${list.length} conversation${list.length === 1 ? '' : 's'}.` };
  } catch (e) {
    banner.value = { message: `Could not import ${file.name}: ${e instanceof Error ? e.message : String(e)}` };
  }
}

/** New chat, search, the conversation list, import and export of everything. */
export function Sidebar() {
  const file = useRef<HTMLInputElement>(null);
  const hits = search(conversations.value, searchQuery.value);
  return (
    <aside class={`sidebar ${sidebarOpen.value ? 'open' : ''}`} aria-label="Conversations">
      <div class="sidebar-head">
        <button
          type="button"
          class="btn new-chat"
          data-testid="new-chat"
          title="New chat (Ctrl+Shift+O)"
          onClick={() => {
            newChat();
            sidebarOpen.value = false;
          }}
        >
          <Icon name="plus" /> New chat
        </button>
        <IconButton icon="close" label="Close the list" class="only-narrow" onClick={() => (sidebarOpen.value = false)} />
      </div>
      <SearchBox />
      <ul class="conv-list" data-testid="conversation-list">
        {hits.map((h) => (
          <ConversationItem key={h.conversation.id} hit={h} />
        ))}
        {hits.length === 0 && (
          <li class="conv-none">{searchQuery.value ? 'No chat matches.' : 'No chats yet.'}</li>
        )}
      </ul>
      <div class="sidebar-foot">
        <button type="button" class="btn" data-testid="import" onClick={() => file.current?.click()}>
          <Icon name="upload" size={16} /> Import
        </button>
        <button
          type="button"
          class="btn"
          data-testid="export-all"
          disabled={!conversations.value.length}
          onClick={() => download('hearth-chats.json', 'application/json', toJson(conversations.value))}
        >
          <Icon name="download" size={16} /> Export all
        </button>
        <input
          ref={file}
          type="file"
          accept="application/json,.json"
          hidden
          data-testid="import-file"
          onChange={(e) => {
            const f = e.currentTarget.files?.[0];
            if (f) void importFile(f);
            e.currentTarget.value = '';
          }}
        />
      </div>
    </aside>
  );
}
