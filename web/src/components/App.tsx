import { loaded } from '../state/conversations';
import { panel, sidebarOpen } from '../state/ui';
import { ApiKeyDialog } from './ApiKeyDialog';
import { Banner } from './Banner';
import { Composer } from './Composer';
import { Header } from './Header';
import { HelpPanel } from './HelpPanel';
import { MessageList } from './MessageList';
import { SettingsPanel } from './SettingsPanel';
import { Sidebar } from './Sidebar';
import { StatusPanel } from './StatusPanel';

function copyCode(e: MouseEvent): void {
  const btn = (e.target as HTMLElement).closest('.copy-code');
  const code = btn?.closest('.code-block')?.querySelector('code');
  if (!btn || !code) return;
  void navigator.clipboard?.writeText(code.textContent ?? '').then(() => {
    btn.textContent = 'Copied';
    setTimeout(() => (btn.textContent = 'Copy'), 1200);
  });
}

export function App() {
  const p = panel.value;
  return (
    <div class={`app ${p !== 'none' ? 'with-panel' : ''}`}>
      <Sidebar />
      {sidebarOpen.value && <div class="scrim only-narrow" onClick={() => (sidebarOpen.value = false)} />}
      <main class="main" onClick={copyCode}>
        <Header />
        <Banner />
        {loaded.value ? <MessageList /> : <div class="messages" />}
        <Composer />
      </main>
      {p === 'settings' && <SettingsPanel />}
      {p === 'status' && <StatusPanel />}
      {p === 'help' && <HelpPanel />}
      <ApiKeyDialog />
    </div>
  );
}
