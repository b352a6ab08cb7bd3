import { useEffect, useRef } from 'preact/hooks';
import { focusSearch, searchQuery } from '../state/ui';
import { Icon } from './icons';

/** Full-text search over every conversation (Ctrl+K). */
export function SearchBox() {
  const input = useRef<HTMLInputElement>(null);
  const ask = focusSearch.value;
  useEffect(() => {
    if (ask) input.current?.focus();
  }, [ask]);
  return (
    <label class="search">
      <Icon name="search" size={16} />
      <input
        ref={input}
        type="search"
        placeholder="Search chats"
        aria-label="Search chats"
        data-testid="search"
        value={searchQuery.value}
        onInput={(e) => (searchQuery.value = e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Escape') {
            searchQuery.value = '';
            e.currentTarget.blur();
          }
        }}
      />
    </label>
  );
}
