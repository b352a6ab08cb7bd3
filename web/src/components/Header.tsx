import { current } from '../state/conversations';
import { panel, sidebarOpen, togglePanel } from '../state/ui';
import { IconButton } from './IconButton';
import { HealthDot } from './HealthDot';
import { ModelPicker } from './ModelPicker';
import { ThemeButton } from './ThemeButton';

export function Header() {
  const p = panel.value;
  return (
    <header class="topbar">
      <IconButton icon="menu" label="Chats" class="only-narrow" data-testid="menu" onClick={() => (sidebarOpen.value = true)} />
      <h2 class="conv-heading" title={current.value.title}>
        {current.value.title}
      </h2>
      <HealthDot />
      <ModelPicker />
      <IconButton
        icon="settings"
        label="Chat settings"
        data-testid="open-settings"
        aria-pressed={p === 'settings'}
        onClick={() => togglePanel('settings')}
      />
      <IconButton
        icon="status"
        label="Server status"
        data-testid="open-status"
        aria-pressed={p === 'status'}
        onClick={() => togglePanel('status')}
      />
      <ThemeButton />
      <IconButton icon="help" label="Keyboard shortcuts" class="only-wide" aria-pressed={p === 'help'} onClick={() => togglePanel('help')} />
    </header>
  );
}
