"""The queue as a virtual list: every task listed, only the rows in view drawn, the cursor kept on its task."""

from __future__ import annotations

from textual.app import App, ComposeResult

from agentbox.core.engine.models import Acceptance, Contract, Run, Task
from agentbox.tui.widgets.queue import QueueList

RUN_ID = "run-20260101-120000-a1b2"


def big_run(tasks: int, executing: int = 0) -> Run:
    run = Run(id=RUN_ID, status="running", contract=Contract(goal="many tasks", mode="hierarchical"))
    for n in range(tasks):
        run.tasks[f"t{n:04d}"] = Task(id=f"t{n:04d}", assignee="builder", brief=f"task {n}",
                                      acceptance=[Acceptance(id="a1", criterion="done")],
                                      state="executing" if n < executing else "queued")
    return run


class QueueApp(App[None]):
    def compose(self) -> ComposeResult:
        yield QueueList(id="queue")


async def test_every_task_is_listed_and_only_the_rows_in_view_are_drawn() -> None:
    app = QueueApp()
    async with app.run_test(size=(60, 20)) as pilot:
        queue = app.query_one(QueueList)
        drawn: list[str] = []
        draw = queue._render_row
        queue._render_row = lambda row, *args, **kwargs: drawn.append(row.key) or draw(row, *args, **kwargs)  # type: ignore[method-assign]
        queue.run = big_run(1000)
        await pilot.pause()
        assert len(queue.groups["queued"]) == 1000  # no cap: the palette is not the only way to the 1000th
        assert 0 < len(drawn) <= queue.size.height
        drawn.clear()
        queue.focus()
        await pilot.press("down", "down")
        assert len(drawn) <= 2 * queue.size.height  # a focus switch and two moves: the rows in view at most
        drawn.clear()
        await pilot.press("end")
        await pilot.pause()
        assert queue.selected_task == "t0999" and "t0999" in drawn and len(drawn) <= queue.size.height + 1


async def test_the_cursor_stays_on_its_task_when_the_task_changes_group() -> None:
    app = QueueApp()
    async with app.run_test(size=(60, 20)) as pilot:
        queue = app.query_one(QueueList)
        queue.run = big_run(300)
        await pilot.pause()
        queue.select_task("t0250")
        await pilot.pause()
        assert queue.selected_task == "t0250"
        queue.run = big_run(300, executing=260)  # t0250 is now executing, in the first group
        await pilot.pause()
        assert queue.selected_task == "t0250" and queue.groups["executing"][250] == "t0250"
        assert queue.scroll_y <= queue.cursor_row < queue.scroll_y + queue.size.height  # and is in view


async def test_enter_chooses_a_task_and_toggles_a_group() -> None:
    chosen: list[str] = []

    class Chooser(QueueApp):
        def on_queue_list_task_chosen(self, message: QueueList.TaskChosen) -> None:
            chosen.append(message.task_id)

    app = Chooser()
    async with app.run_test(size=(60, 20)) as pilot:
        queue = app.query_one(QueueList)
        queue.run = big_run(5, executing=2)
        queue.focus()
        await pilot.press("down", "down", "enter")  # the first task of the first group
        assert chosen == ["t0000"]
        await pilot.press("up", "enter")  # the group's header: it closes
        assert queue.groups["executing"] == ["t0000", "t0001"]  # still in the queue, only folded
        assert [row.key for row in queue.rows] == ["state:executing", "state:queued", "t0002", "t0003", "t0004"]


async def test_a_new_theme_redraws_the_rows_it_had_cached() -> None:
    async def rows_after(theme: str, then: str | None) -> list[object]:
        app = QueueApp()
        async with app.run_test(size=(60, 20)) as pilot:
            app.theme = theme
            queue = app.query_one(QueueList)
            queue.run = big_run(5, executing=2)
            queue.focus()
            await pilot.press("down", "down")
            if then is not None:
                app.theme = then
                await pilot.pause()
                await pilot.pause()
            return [[(s.text, s.style) for s in queue.render_line(y)] for y in range(4)]

    assert await rows_after("textual-dark", "nord") == await rows_after("nord", None)
